package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// The labels a worker's pod and claims carry (selectors need them), and
// the annotation that keeps the spec's labels whole.
const (
	labelManaged = protocol.LabelManaged   // "true"
	labelPrefix  = protocol.LabelKeyPrefix // the key prefix, as a label value
	labelWorker  = protocol.LabelWorkerID  // the worker it was made for
	// labelServes is the worker a pod serves when it is not the one it was
	// made for (a warm pool's pod given to the worker it wakes: Rename).
	labelServes = protocol.LabelPrefix + "serves"
	// annotationLabels holds the spec's labels as JSON: values that are
	// no valid label value (an image tag, a time) are kept there.
	annotationLabels = protocol.LabelPrefix + "labels"
	// gateStart holds a created pod back from the scheduler until Start.
	gateStart = "agentvisor.io/start"
	// containerName is the one container of a worker's pod.
	containerName = "worker"
)

var everything = labels.Everything()

// labelValue is s when it is a valid label value, else a hash of it
// (a key prefix with a colon, a long project id).
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "h-" + hex.EncodeToString(sum[:])[:40]
}

// instanceID is a pod's instance id: its name and uid, so that an id
// never names a later incarnation made under the same name.
func instanceID(p *corev1.Pod) string { return p.Name + "/" + string(p.UID) }

// splitID splits an instance id; a plain name has no uid.
func splitID(ref string) (name string, uid types.UID) {
	name, u, _ := strings.Cut(strings.TrimPrefix(ref, "/"), "/")
	return name, types.UID(u)
}

// cutInstanceName returns the worker of an instance name.
func cutInstanceName(name string) (string, bool) { return strings.CutPrefix(name, engine.NamePrefix) }

// workerOf is the worker a pod serves: its serves annotation, else the
// worker its name says.
func workerOf(p *corev1.Pod) string {
	if w := p.Annotations[labelServes]; w != "" {
		return w
	}
	if w, ok := cutInstanceName(p.Name); ok {
		return w
	}
	return p.Labels[labelWorker]
}

// specLabels are the labels a pod was made with.
func specLabels(p *corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	if s := p.Annotations[annotationLabels]; s != "" {
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("pod %s: annotation %s: %w", p.Name, annotationLabels, err)
		}
	}
	return out, nil
}

// servesPatch is the JSON patch that gives a pod to worker: the serves
// annotation and label. Its labels keep the worker it was made for, as a
// renamed Docker container's do: the reconciliation tells a handed-over
// instance by the two differing.
func servesPatch(uid types.UID, worker string) ([]byte, error) {
	esc := func(k string) string { return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1") }
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": string(uid)},
		{"op": "add", "path": "/metadata/annotations/" + esc(labelServes), "value": worker},
		{"op": "add", "path": "/metadata/labels/" + esc(labelServes), "value": labelValue(worker)},
	}
	return json.Marshal(ops)
}

// podFor is the pod of spec: the worker-wrapper as PID 1 of its one
// container, non-root, every capability dropped, no privilege
// escalation, no service-account token, behind the start gate.
func (e *Engine) podFor(spec engine.Spec) (*corev1.Pod, error) {
	uid, gid, err := parseUser(spec.User)
	if err != nil {
		return nil, err
	}
	whole, err := json.Marshal(spec.Labels)
	if err != nil {
		return nil, err
	}
	lbl := map[string]string{labelManaged: "true", labelPrefix: labelValue(e.p.Prefix)}
	if w := spec.Labels[protocol.LabelWorkerID]; w != "" {
		lbl[labelWorker] = labelValue(w)
	}
	grace := int64(spec.StopTimeout.Seconds())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: e.ns, Labels: lbl,
			Annotations: map[string]string{annotationLabels: string(whole)}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			TerminationGracePeriodSeconds: &grace,
			SchedulingGates:               []corev1.PodSchedulingGate{{Name: gateStart}},
			NodeSelector:                  e.p.NodeSelector,
			Tolerations:                   e.p.Tolerations,
			ServiceAccountName:            e.p.ServiceAccount,
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: ptr(uid != 0), FSGroup: &gid,
				FSGroupChangePolicy: ptr(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		},
	}
	if e.p.RuntimeClassName != "" {
		pod.Spec.RuntimeClassName = &e.p.RuntimeClassName
	}
	// A spec's runtime (gVisor's RuntimeClass) is the worker's own, over
	// the engine's default class.
	if spec.Runtime != "" {
		pod.Spec.RuntimeClassName = &spec.Runtime
	}
	switch spec.Network {
	case "host":
		pod.Spec.HostNetwork = true
		pod.Spec.DNSPolicy = corev1.DNSDefault
	case engine.Sealed:
		// The pod network, its way out its gateway's sockets mounted from
		// the node; what else reaches the pod network is the cluster's
		// network policy's to say.
	default:
		return nil, fmt.Errorf("network %q: on Kubernetes a worker is sealed (the pod network and its gateway's sockets) or on the node's network (host)", spec.Network)
	}
	c := corev1.Container{
		Name: containerName, Image: spec.Image, ImagePullPolicy: e.p.PullPolicy,
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Privileged: ptr(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Resources:                resourcesOf(spec.Limits),
	}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	for i, m := range spec.Mounts {
		name := "v" + strconv.Itoa(i)
		var src corev1.VolumeSource
		switch {
		case m.HostPath != "":
			// It must exist (a gateway's socket directory on this node):
			// the kubelet would make an empty one otherwise.
			src.HostPath = &corev1.HostPathVolumeSource{Path: m.HostPath, Type: ptr(corev1.HostPathDirectory)}
		case e.p.StorageClass != "":
			src.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(m.Volume)}
		default:
			src.EmptyDir = &corev1.EmptyDirVolumeSource{}
			if spec.Limits.Disk > 0 {
				src.EmptyDir.SizeLimit = resource.NewQuantity(spec.Limits.Disk, resource.BinarySI)
			}
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: m.Target, ReadOnly: m.ReadOnly})
	}
	pod.Spec.Containers = []corev1.Container{c}
	return pod, nil
}

// resourcesOf are a worker's limits as the container's: the limits as
// given; requests of a tenth of the CPU (an idle worker uses next to
// none) and of the disk, and a quarter of the memory, so that the
// scheduler places workers by what they use, not by their ceilings. Pids
// have no per-pod field: the node's podPidsLimit bounds them. The disk is
// the container's ephemeral storage (its writable layer, its logs and its
// emptyDir volumes): the kubelet measures it every few seconds and evicts
// the pod past the limit, where Docker's disk refuses the write itself
// (ENOSPC); a volume claim's size is its storage class's to enforce.
func resourcesOf(l engine.Limits) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	if l.Memory > 0 {
		r.Limits[corev1.ResourceMemory] = *resource.NewQuantity(l.Memory, resource.BinarySI)
		r.Requests[corev1.ResourceMemory] = *resource.NewQuantity(l.Memory/4, resource.BinarySI)
	}
	if l.CPUs > 0 {
		milli := int64(l.CPUs * 1000)
		r.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
		r.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(milli/10, 10), resource.DecimalSI)
	}
	if l.Disk > 0 {
		r.Limits[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(l.Disk, resource.BinarySI)
		r.Requests[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(max(l.Disk/10, 1), resource.BinarySI)
	}
	return r
}

// parseUser reads "uid:gid" (or "uid").
func parseUser(s string) (uid, gid int64, err error) {
	if s == "" {
		return 1000, 1000, nil
	}
	u, g, ok := strings.Cut(s, ":")
	if uid, err = strconv.ParseInt(u, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("user %q: a numeric uid", s)
	}
	gid = uid
	if ok {
		if gid, err = strconv.ParseInt(g, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("user %q: a numeric gid", s)
		}
	}
	return uid, gid, nil
}

// instanceOf is what the engine reports of a pod.
func instanceOf(p *corev1.Pod) engine.Instance {
	in := engine.Instance{ID: instanceID(p), Name: p.Name, Worker: workerOf(p), Created: p.CreationTimestamp.Time, IP: p.Status.PodIP}
	in.Labels, _ = specLabels(p)
	if len(p.Spec.Containers) > 0 {
		in.Image = p.Spec.Containers[0].Image
	}
	if p.Spec.HostNetwork {
		in.IP = ""
	}
	in.State, in.ExitCode, in.OOMKilled = stateOf(p)
	return in
}

// fatalWaiting are the reasons a container waits that no wait ends: the
// pod's worker will never start. Others the kubelet retries
// (CreateContainerError, RunContainerError after a kubelet or containerd
// restart) are waits, which the worker's missing heartbeat bounds.
var fatalWaiting = map[string]bool{"ErrImageNeverPull": true, "InvalidImageName": true}

// exitNeverStarted is the exit code reported for a container that could
// not start (Docker's for a container its engine could not run).
const exitNeverStarted = 125

// stateOf maps a pod onto the engine's states.
func stateOf(p *corev1.Pod) (engine.State, int, bool) {
	if len(p.Spec.SchedulingGates) > 0 {
		return engine.Created, 0, false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		switch {
		case cs.State.Terminated != nil:
			t := cs.State.Terminated
			return engine.Exited, int(t.ExitCode), t.Reason == "OOMKilled"
		case cs.State.Waiting != nil && fatalWaiting[cs.State.Waiting.Reason]:
			return engine.Exited, exitNeverStarted, false
		}
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return engine.Exited, 0, false
	case corev1.PodFailed:
		// Failed with no container that ended: evicted, or refused by
		// the kubelet before its container ran (no room, no affinity).
		if p.Status.Reason == "Evicted" {
			return engine.Exited, exitKilled, false
		}
		return engine.Exited, exitNeverStarted, false
	case corev1.PodUnknown:
		return engine.Other, 0, false
	}
	// Pending (placed, its container being made) or Running: started.
	return engine.Running, 0, false
}

// up reports whether a pod's worker may still be running.
func up(p *corev1.Pod) bool {
	st, _, _ := stateOf(p)
	return st == engine.Running || st == engine.Other
}

// selectorOf is a label selector's text.
func selectorOf(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// annotationVolume keeps a claim's volume name, which its own name may
// not be (claimName).
const annotationVolume = protocol.LabelPrefix + "volume"

// claimName is a project volume's claim: its name when it is a valid
// object name, else a lowercase form of it with a hash of the whole (a
// project id with capitals or an underscore).
func claimName(volume string) string {
	if len(validation.IsDNS1123Subdomain(volume)) == 0 && len(volume) <= 63 {
		return volume
	}
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, volume)
	sum := sha256.Sum256([]byte(volume))
	return strings.Trim(clean[:min(len(clean), 40)], "-") + "-" + hex.EncodeToString(sum[:])[:12]
}

// ensureClaim makes a project volume's claim; one in place is kept.
func (e *Engine) ensureClaim(ctx context.Context, m engine.Mount) error {
	size, err := resource.ParseQuantity(e.p.VolumeSize)
	if err != nil {
		return engine.Wrap(engine.ErrInvalid, fmt.Errorf("volume size %q: %w", e.p.VolumeSize, err))
	}
	whole, _ := json.Marshal(m.Labels)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claimName(m.Volume), Namespace: e.ns,
			Labels:      map[string]string{labelManaged: "true", labelPrefix: labelValue(e.p.Prefix)},
			Annotations: map[string]string{annotationLabels: string(whole), annotationVolume: m.Volume}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &e.p.StorageClass,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	_, err = e.api.CoreV1().PersistentVolumeClaims(e.ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return Classify(err)
	}
	return nil
}

// Volumes lists the prefix's project volumes (claims).
func (e *Engine) Volumes(ctx context.Context) ([]engine.Volume, error) {
	list, err := e.api.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{LabelSelector: e.volSel})
	if err != nil {
		return nil, Classify(err)
	}
	out := make([]engine.Volume, 0, len(list.Items))
	for _, c := range list.Items {
		v := engine.Volume{Name: c.Name, Labels: map[string]string{}}
		if name := c.Annotations[annotationVolume]; name != "" {
			v.Name = name
		}
		_ = json.Unmarshal([]byte(c.Annotations[annotationLabels]), &v.Labels)
		out = append(out, v)
	}
	return out, nil
}

// RemoveVolume deletes a claim; one a live pod of the prefix mounts is
// ErrConflict unless force (Kubernetes would keep it until that pod
// ends).
func (e *Engine) RemoveVolume(ctx context.Context, name string, force bool) error {
	name = claimName(name)
	if _, err := e.api.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	}
	if !force {
		if err := e.ready(ctx); err != nil {
			return err
		}
		pods, _ := e.pods.Pods(e.ns).List(everything)
		for _, p := range pods {
			for _, v := range p.Spec.Volumes {
				if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == name && up(p) {
					return engine.Wrap(engine.ErrConflict, fmt.Errorf("volume %s is in use by pod %s", name, p.Name))
				}
			}
		}
	}
	err := e.api.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return Classify(err)
}

func ptr[T any](v T) *T { return &v }
