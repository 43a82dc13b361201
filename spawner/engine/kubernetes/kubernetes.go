// Package kubernetes is the spawner's engine over a Kubernetes cluster: a
// worker's instance is a Pod named after it (engine.InstanceName) in one
// namespace, with the worker-wrapper as PID 1 of its one container, the
// spec's limits as requests and limits, and its labels kept whole in an
// annotation (Kubernetes label values are narrower than Docker's).
//
// What the engine knows of its pods comes from an informer (one LIST,
// then a WATCH): Inspect, List and the events read its cache, so a
// manager at rest makes no API requests. A create makes the pod behind a
// scheduling gate (created, not started, as a Docker container is between
// create and start); Start lifts the gate. Kubernetes cannot freeze a pod:
// Suspend is engine.ErrUnsupported and the spawner hibernates instead of
// pausing (docs/kubernetes.md says what that costs).
//
// Placement is the scheduler's: node selectors, tolerations and a
// RuntimeClass come from the engine's Params, the same for every worker.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/agentvisor/agentvisor/spawner/engine"
)

var _ engine.Engine = (*Engine)(nil)

// ErrNoContainers refuses a worker that runs containers of its own (the
// DOCKER capability): rootless Podman in a pod needs a seccomp profile on
// every node, an unmasked /proc (procMount: Unmasked, behind a feature
// gate) and a memory volume, none of which this engine sets up yet. The
// create fails INVALID_COMMAND with this text.
var ErrNoContainers = errors.New("kubernetes: the DOCKER capability (an engine inside the worker) is not available on the Kubernetes engine; run such workers on a Docker host")

// Params configure an Engine.
type Params struct {
	Client    clientset.Interface
	Namespace string // where the workers' pods and claims are (default "agentvisor", deploy/kubernetes/base's)
	Prefix    string // the key prefix whose pods it sees
	// StorageClass, when set, makes a project volume a PersistentVolumeClaim
	// of that class (ReadWriteOnce, VolumeSize); unset, a project volume is
	// the pod's own emptyDir, gone with it (the session store in Redis
	// carries a long-lived worker's sessions across incarnations).
	StorageClass string
	VolumeSize   string // default "1Gi"
	// LoadImage, when set, makes an image available to the cluster's
	// nodes before a pod names it (the local cluster: docker save into its
	// containerd); unset, the nodes pull it (PullPolicy).
	LoadImage func(ctx context.Context, image string) error
	// PullPolicy of the worker container (default Never with LoadImage,
	// IfNotPresent without).
	PullPolicy corev1.PullPolicy
	// Placement: the same for every worker's pod.
	NodeSelector     map[string]string
	Tolerations      []corev1.Toleration
	RuntimeClassName string
	// ServiceAccount runs the pods (default: the namespace's "default");
	// its token is never mounted.
	ServiceAccount string
	Log            *slog.Logger
}

// Engine is engine.Engine over a Kubernetes cluster.
type Engine struct {
	p      Params
	api    clientset.Interface
	calls  apiCalls // how a call is made again while the API server cannot answer
	ns     string
	log    *slog.Logger
	sel    string // the label selector of the prefix's pods
	volSel string // of its claims

	factory informers.SharedInformerFactory
	pods    listersv1.PodLister
	index   cache.Indexer
	synced  cache.InformerSynced
	stop    chan struct{}
	started sync.Once
	closed  sync.Once

	mu       sync.Mutex
	subs     map[chan engine.Event]<-chan struct{} // Watch's channels, and the end of each one's context
	dead     map[types.UID]bool                    // pods whose end was told
	loaded   map[string]bool                       // images LoadImage made available
	changed  chan struct{}                         // closed and renewed at every informer event
	loadOnce sync.Mutex                            // one LoadImage at a time
}

// New returns the engine of the pods of a key prefix in p.Namespace. Its
// informer starts with the first call that needs it.
func New(p Params) *Engine {
	if p.Namespace == "" {
		p.Namespace = "agentvisor"
	}
	if p.VolumeSize == "" {
		p.VolumeSize = "1Gi"
	}
	if p.PullPolicy == "" {
		p.PullPolicy = corev1.PullIfNotPresent
		if p.LoadImage != nil {
			p.PullPolicy = corev1.PullNever
		}
	}
	if p.Log == nil {
		p.Log = slog.Default()
	}
	e := &Engine{p: p, api: p.Client, calls: apiCalls{api: p.Client}, ns: p.Namespace, log: p.Log, stop: make(chan struct{}),
		subs: map[chan engine.Event]<-chan struct{}{}, dead: map[types.UID]bool{}, loaded: map[string]bool{}, changed: make(chan struct{})}
	e.sel = labelManaged + "=true," + labelPrefix + "=" + labelValue(p.Prefix)
	e.volSel = e.sel
	e.factory = informers.NewSharedInformerFactoryWithOptions(p.Client, 0, informers.WithNamespace(p.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = e.sel }))
	inf := e.factory.Core().V1().Pods()
	e.pods = inf.Lister()
	informer := inf.Informer()
	_ = informer.AddIndexers(cache.Indexers{indexWorker: func(obj any) ([]string, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			return []string{workerOf(pod)}, nil
		}
		return nil, nil
	}})
	e.index = informer.GetIndexer()
	e.synced = informer.HasSynced
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.observe(nil, obj) },
		UpdateFunc: func(old, obj any) { e.observe(old, obj) },
		DeleteFunc: e.deleted,
	})
	return e
}

const indexWorker = "worker"

// ready starts the informer once and waits for its first list.
func (e *Engine) ready(ctx context.Context) error {
	if e.synced() {
		return nil
	}
	// One list first: a namespace that does not exist or rights the
	// manager lacks are an error of this call, not an informer that
	// never syncs (it would only log them).
	if _, err := e.api.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: e.sel, Limit: 1}); err != nil {
		return Classify(fmt.Errorf("kubernetes: list the pods of namespace %s: %w", e.ns, err))
	}
	e.started.Do(func() { e.factory.Start(e.stop) })
	if !cache.WaitForCacheSync(ctx.Done(), e.synced) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return engine.Wrap(engine.ErrUnavailable, errors.New("kubernetes: the pods' informer did not sync"))
	}
	return nil
}

// Create makes a worker's pod behind its scheduling gate; its project
// volumes' claims are made first (one in place is kept).
func (e *Engine) Create(ctx context.Context, spec engine.Spec) (string, error) {
	if spec.Containers {
		return "", engine.Wrap(engine.ErrInvalid, ErrNoContainers)
	}
	if err := e.ready(ctx); err != nil {
		return "", err
	}
	if err := e.loadImage(ctx, spec.Image); err != nil {
		return "", err
	}
	if e.p.StorageClass != "" {
		for _, m := range spec.Mounts {
			if m.Volume != "" {
				if err := e.ensureClaim(ctx, m); err != nil {
					return "", err
				}
			}
		}
	}
	pod, err := e.podFor(spec)
	if err != nil {
		return "", engine.Wrap(engine.ErrInvalid, err)
	}
	var made *corev1.Pod
	err = e.calls.retry(ctx, func() (err error) {
		made, err = e.api.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		// A create the API took before the connection broke is found by
		// the retry as a name in use: the caller's ErrConflict path
		// inspects it and takes it as made.
		return "", Classify(err)
	}
	return instanceID(made), nil
}

// loadImage makes an image available to the nodes, once per process.
func (e *Engine) loadImage(ctx context.Context, image string) error {
	if e.p.LoadImage == nil {
		return nil
	}
	e.loadOnce.Lock()
	defer e.loadOnce.Unlock()
	e.mu.Lock()
	done := e.loaded[image]
	e.mu.Unlock()
	if done {
		return nil
	}
	if err := e.p.LoadImage(ctx, image); err != nil {
		return fmt.Errorf("kubernetes: load image %s into the cluster: %w", image, err)
	}
	e.mu.Lock()
	e.loaded[image] = true
	e.mu.Unlock()
	return nil
}

// Forget makes the next create of image load it again (the image builder
// made it anew, or it went from the nodes).
func (e *Engine) Forget(image string) {
	e.mu.Lock()
	delete(e.loaded, image)
	e.mu.Unlock()
}

// Start lifts a pod's scheduling gate: the scheduler places it and the
// kubelet starts it. A pod started already is no error.
func (e *Engine) Start(ctx context.Context, id string) (string, error) {
	pod, err := e.get(ctx, id)
	if err != nil {
		return id, err
	}
	if len(pod.Spec.SchedulingGates) == 0 {
		return id, nil
	}
	_, uid := splitID(id)
	lift := func(pod *corev1.Pod) error {
		patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},{"op":"remove","path":"/spec/schedulingGates"}]`, pod.UID)
		_, err := e.api.CoreV1().Pods(e.ns).Patch(ctx, pod.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	err = e.calls.retry(ctx, func() error {
		err := lift(pod)
		if !apierrors.IsInvalid(err) {
			return err
		}
		// Refused: the gate was lifted by an earlier try whose answer was
		// lost, or the pod was not the API's (a cache behind the API
		// server, after its restart, still holding the worker's earlier
		// incarnation). The API's pod decides; a start by the worker's
		// name starts the pod serving the worker now.
		cur, ferr := e.fetch(ctx, pod.Name, "")
		switch {
		case ferr != nil:
			return err
		case cur.UID == pod.UID || uid == "":
			if len(cur.Spec.SchedulingGates) == 0 {
				return nil
			}
			pod = cur
			return lift(pod)
		}
		return err
	})
	return id, Classify(err)
}

// Suspend is not supported: Kubernetes cannot freeze a pod.
func (e *Engine) Suspend(ctx context.Context, id string) error {
	return engine.Wrap(engine.ErrUnsupported, errors.New("kubernetes: a pod cannot be frozen"))
}

// Resume has nothing to thaw: a pod that exists runs.
func (e *Engine) Resume(ctx context.Context, id string) error {
	_, err := e.get(ctx, id)
	return err
}

// Suspends reports false: see Suspend.
func (e *Engine) Suspends() bool { return false }

// RunsContainers reports false: see ErrNoContainers.
func (e *Engine) RunsContainers() bool { return false }

// Stop deletes a pod with grace as its termination grace period (the
// kubelet sends SIGTERM, then SIGKILL) and waits until its container has
// ended or the pod is gone.
func (e *Engine) Stop(ctx context.Context, id string, grace time.Duration) error {
	pod, err := e.deleteCurrent(ctx, id, int64(grace.Seconds()))
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, grace+30*time.Second)
	defer cancel()
	asked := time.Now()
	return e.waitFor(wctx, func() bool {
		if p, ok := e.cached(pod.Name); !ok || p.UID != pod.UID || !up(p) {
			return true
		}
		// The cache may be behind the API (its watch broken and not yet
		// relisted, as after an API server restart): the API is asked
		// too, every 2 s.
		if time.Since(asked) < 2*time.Second {
			return false
		}
		asked = time.Now()
		p, err := e.fetch(wctx, pod.Name, pod.UID)
		return errors.Is(err, engine.ErrNotFound) || err == nil && !up(p)
	})
}

// Remove deletes a pod at once (grace 0: the API forgets it now, the
// kubelet kills what runs). A pod gone is ErrNotFound.
func (e *Engine) Remove(ctx context.Context, id string) error {
	_, err := e.deleteCurrent(ctx, id, 0)
	return err
}

// deleteCurrent deletes the pod id names, with grace, and returns it. By
// a worker's instance name, the pod meant is the one that serves the
// worker now: the informer's cache may still hold an incarnation the API
// no longer has (its watch broken and not yet relisted, as after an API
// server restart), whose uid the delete's precondition then refuses; the
// API's own pod of that name is read and deleted instead. By an instance
// id (name and uid) the pod is that one, or gone.
func (e *Engine) deleteCurrent(ctx context.Context, id string, grace int64) (*corev1.Pod, error) {
	pod, err := e.get(ctx, id)
	if err != nil {
		return nil, err
	}
	err = e.delete(ctx, pod, grace)
	if name, uid := splitID(id); uid == "" && errors.Is(err, engine.ErrNotFound) {
		if pod, err = e.fetch(ctx, name, ""); err != nil {
			return nil, err
		}
		err = e.delete(ctx, pod, grace)
	}
	return pod, err
}

func (e *Engine) delete(ctx context.Context, pod *corev1.Pod, grace int64) error {
	uid := pod.UID
	err := e.calls.retry(ctx, func() error {
		return e.api.CoreV1().Pods(e.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace,
			Preconditions: &metav1.Preconditions{UID: &uid}})
	})
	if apierrors.IsConflict(err) { // the precondition: another incarnation has the name now
		return engine.Wrap(engine.ErrNotFound, err)
	}
	return Classify(err)
}

// Rename gives a pod to another worker: a pod's name cannot change, so
// the worker it serves is a label (workerOf reads it first).
func (e *Engine) Rename(ctx context.Context, id, worker string) error {
	pod, err := e.get(ctx, id)
	if err != nil {
		return err
	}
	patch, err := servesPatch(pod.UID, worker)
	if err != nil {
		return engine.Wrap(engine.ErrInvalid, err)
	}
	if err := e.calls.retry(ctx, func() error {
		_, err := e.api.CoreV1().Pods(e.ns).Patch(ctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		return Classify(err)
	}
	// Until the informer sees the patch, a look-up by the new worker must
	// find the pod: wait for it, briefly. The patch is made: a cache
	// slower than that is no failure of it.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.waitFor(wctx, func() bool {
		p, ok := e.cached(pod.Name)
		return !ok || workerOf(p) == worker
	}); err != nil {
		e.log.Warn("kubernetes: a renamed pod not seen renamed within 10 s", "pod", pod.Name, "worker_id", worker)
	}
	return nil
}

// Inspect returns a pod by its instance id ("<name>/<uid>") or by the
// name of the worker instance it serves.
func (e *Engine) Inspect(ctx context.Context, ref string) (engine.Instance, error) {
	pod, err := e.get(ctx, ref)
	if err != nil {
		return engine.Instance{}, err
	}
	return instanceOf(pod), nil
}

// List returns the prefix's worker pods, from the informer's cache.
func (e *Engine) List(ctx context.Context, f engine.Filter) ([]engine.Instance, error) {
	if err := e.ready(ctx); err != nil {
		return nil, err
	}
	pods, err := e.pods.Pods(e.ns).List(everything)
	if err != nil {
		return nil, Classify(err)
	}
	out := make([]engine.Instance, 0, len(pods))
	for _, p := range pods {
		in := instanceOf(p)
		if f.State != "" && in.State != f.State {
			continue
		}
		out = append(out, in)
	}
	return out, nil
}

// Info sums the allocatable resources of the cluster's schedulable nodes
// (those a worker's node selector admits).
func (e *Engine) Info(ctx context.Context) (engine.Info, error) {
	nodes, err := e.api.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selectorOf(e.p.NodeSelector)})
	if err != nil {
		return engine.Info{}, Classify(err)
	}
	info := engine.Info{Name: "kubernetes/" + e.ns}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			continue
		}
		info.CPUs += int(n.Status.Allocatable.Cpu().Value())
		info.MemoryMax += n.Status.Allocatable.Memory().Value()
	}
	return info, nil
}

// Prepare, Sweep: nothing is kept ahead of creates on Kubernetes.
func (e *Engine) Prepare()                  {}
func (e *Engine) Sweep(context.Context) int { return 0 }

// Close stops the informer.
func (e *Engine) Close(context.Context) {
	e.closed.Do(func() {
		close(e.stop)
		e.factory.Shutdown()
	})
}

// get returns the pod of an instance id or a worker's instance name:
// from the cache, else from the API (a pod made an instant ago).
func (e *Engine) get(ctx context.Context, ref string) (*corev1.Pod, error) {
	if err := e.ready(ctx); err != nil {
		return nil, err
	}
	name, uid := splitID(ref)
	if uid == "" {
		// A worker's instance name: the pod serving that worker.
		worker, _ := cutInstanceName(name)
		if objs, _ := e.index.ByIndex(indexWorker, worker); len(objs) > 0 {
			return newest(objs), nil
		}
	} else if p, ok := e.cached(name); ok && p.UID == uid {
		return p, nil
	}
	return e.fetch(ctx, name, uid)
}

// fetch reads a pod from the API, not the cache: name, and uid when set,
// of one of the prefix's workers (by a worker's instance name, still
// serving that worker).
func (e *Engine) fetch(ctx context.Context, name string, uid types.UID) (*corev1.Pod, error) {
	p, err := e.api.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, Classify(err)
	}
	if p.Labels[labelPrefix] != labelValue(e.p.Prefix) || p.Labels[labelManaged] != "true" {
		return nil, engine.Wrap(engine.ErrNotFound, fmt.Errorf("pod %s is not one of this key prefix's workers", name))
	}
	if uid != "" && p.UID != uid {
		return nil, engine.Wrap(engine.ErrNotFound, fmt.Errorf("pod %s is another incarnation (uid %s, not %s)", name, p.UID, uid))
	}
	if w, _ := cutInstanceName(name); uid == "" && workerOf(p) != w {
		return nil, engine.Wrap(engine.ErrNotFound, fmt.Errorf("pod %s serves worker %s now", name, workerOf(p)))
	}
	return p, nil
}

// cached returns a pod of the informer's cache by name.
func (e *Engine) cached(name string) (*corev1.Pod, bool) {
	p, err := e.pods.Pods(e.ns).Get(name)
	return p, err == nil
}

// waitFor waits until done holds, checked at every informer event.
func (e *Engine) waitFor(ctx context.Context, done func() bool) error {
	for {
		e.mu.Lock()
		ch := e.changed
		e.mu.Unlock()
		if done() {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		case <-ctx.Done():
			return engine.Wrap(engine.ErrUnavailable, ctx.Err())
		}
	}
}

// newest is the most recently made of the pods in objs.
func newest(objs []any) *corev1.Pod {
	var best *corev1.Pod
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		// A pod being deleted gives way to one that is not; then the
		// newer (timestamps have a second's resolution).
		if best == nil || (best.DeletionTimestamp != nil && p.DeletionTimestamp == nil) ||
			((best.DeletionTimestamp == nil) == (p.DeletionTimestamp == nil) && p.CreationTimestamp.After(best.CreationTimestamp.Time)) {
			best = p
		}
	}
	return best
}
