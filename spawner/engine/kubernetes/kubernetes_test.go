package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// These tests run the engine against client-go's fake clientset (an
// object tracker with watches): what the engine asks of the API and how
// it reads pods back. The same engine runs on a real cluster in the k8s
// module's tests (make test-k8s).

func newTest(t *testing.T) (*Engine, *fake.Clientset) {
	t.Helper()
	api := newFake()
	e := New(Params{Client: api, Namespace: "agents", Prefix: "worker:test"})
	t.Cleanup(func() { e.Close(context.Background()) })
	return e, api
}

// newFake is a fake clientset that gives each object it creates a uid,
// as the API server does.
func newFake() *fake.Clientset {
	api := fake.NewClientset()
	n := 0
	api.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if obj, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok {
			n++
			obj.SetUID(types.UID(fmt.Sprintf("uid-%d", n)))
		}
		return false, nil, nil
	})
	return api
}

func spec(worker string) engine.Spec {
	return engine.Spec{Name: engine.InstanceName(worker), Image: "worker:abc", Env: []string{"WORKER_ID=" + worker, "A=b=c"},
		Labels: map[string]string{protocol.LabelManaged: "true", protocol.LabelWorkerID: worker, protocol.LabelKeyPrefix: "worker:test",
			protocol.LabelCreatedAt: "2026-12-02T01:00:00.000Z"},
		User: "1000:1000", StopTimeout: 30 * time.Second, Network: engine.Sealed,
		Limits: engine.Limits{Memory: 2 << 30, CPUs: 1.5, Pids: 512, Disk: 10 << 30},
		Mounts: []engine.Mount{{HostPath: "/run/agentvisor/gateway/" + worker, Target: "/run/agentvisor"}, {Volume: "agentvisor-claude-p1", Target: "/home/worker"}}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// setStatus writes a pod's status as the kubelet would.
func setStatus(t *testing.T, api *fake.Clientset, name string, phase corev1.PodPhase, cs corev1.ContainerState) {
	t.Helper()
	c := context.Background()
	p, err := api.CoreV1().Pods("agents").Get(c, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = phase
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: cs}}
	if _, err := api.CoreV1().Pods("agents").UpdateStatus(c, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventually waits for cond, which the informer makes true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 5 s", what)
}

func TestCreateMakesAHardenedGatedPod(t *testing.T) {
	e, api := newTest(t)
	id, err := e.Create(ctx(t), spec("w1"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := api.CoreV1().Pods("agents").Get(ctx(t), "agentvisor-w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id != "agentvisor-w1/"+string(p.UID) {
		t.Errorf("id %q, want name/uid of %s", id, p.UID)
	}
	s, c := p.Spec, p.Spec.Containers[0]
	if len(s.SchedulingGates) != 1 || *s.AutomountServiceAccountToken || *s.EnableServiceLinks || s.RestartPolicy != corev1.RestartPolicyNever || s.HostNetwork {
		t.Errorf("pod spec: gates %v, token %v, service links %v, restart %s, host network %v", s.SchedulingGates, *s.AutomountServiceAccountToken,
			*s.EnableServiceLinks, s.RestartPolicy, s.HostNetwork)
	}
	if *s.SecurityContext.RunAsUser != 1000 || !*s.SecurityContext.RunAsNonRoot || *c.SecurityContext.AllowPrivilegeEscalation ||
		len(c.SecurityContext.Capabilities.Drop) != 1 || c.SecurityContext.Capabilities.Drop[0] != "ALL" {
		t.Errorf("security: %+v, %+v", s.SecurityContext, c.SecurityContext)
	}
	if *s.TerminationGracePeriodSeconds != 30 {
		t.Errorf("grace %d, want the stop timeout", *s.TerminationGracePeriodSeconds)
	}
	if got := c.Resources.Limits.Memory().Value(); got != 2<<30 {
		t.Errorf("memory limit %d", got)
	}
	if got := c.Resources.Limits.Cpu().MilliValue(); got != 1500 {
		t.Errorf("cpu limit %dm", got)
	}
	if got := c.Resources.Limits.StorageEphemeral().Value(); got != 10<<30 {
		t.Errorf("ephemeral storage limit %d, want the disk limit", got)
	}
	if got := c.Resources.Requests.StorageEphemeral().Value(); got != 1<<30 {
		t.Errorf("ephemeral storage request %d, want a tenth of the limit", got)
	}
	if got := c.Resources.Requests.Cpu().MilliValue(); got != 150 {
		t.Errorf("cpu request %dm, want a tenth of the limit", got)
	}
	if len(c.Env) != 2 || c.Env[1].Name != "A" || c.Env[1].Value != "b=c" {
		t.Errorf("env %v", c.Env)
	}
	if len(s.Volumes) != 2 || s.Volumes[0].HostPath == nil || s.Volumes[1].EmptyDir == nil {
		t.Errorf("volumes %+v: the gateway's directory from the node, the project volume an emptyDir (no storage class)", s.Volumes)
	} else if sl := s.Volumes[1].EmptyDir.SizeLimit; sl == nil || sl.Value() != 10<<30 {
		t.Errorf("the project volume's emptyDir size limit %v, want the disk limit", sl)
	}
	if p.Labels[labelPrefix] == "worker:test" || p.Labels[labelPrefix] == "" {
		t.Errorf("prefix label %q: a colon is no label value, a hash stands for it", p.Labels[labelPrefix])
	}
	in, err := e.Inspect(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if in.State != engine.Created || in.Worker != "w1" || in.Labels[protocol.LabelCreatedAt] != "2026-12-02T01:00:00.000Z" {
		t.Errorf("inspect: %+v", in)
	}
	if _, err := e.Create(ctx(t), spec("w1")); !errors.Is(err, engine.ErrConflict) {
		t.Errorf("a second create of one name: %v, want ErrConflict", err)
	}
}

func TestStartLiftsTheGate(t *testing.T) {
	e, api := newTest(t)
	id, err := e.Create(ctx(t), spec("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.Start(ctx(t), id); err != nil || got != id {
		t.Fatalf("start: %q, %v", got, err)
	}
	p, _ := api.CoreV1().Pods("agents").Get(ctx(t), "agentvisor-w1", metav1.GetOptions{})
	if len(p.Spec.SchedulingGates) != 0 {
		t.Fatalf("gates after start: %v", p.Spec.SchedulingGates)
	}
	eventually(t, "running", func() bool { in, _ := e.Inspect(ctx(t), id); return in.State == engine.Running })
	if _, err := e.Start(ctx(t), id); err != nil {
		t.Errorf("a second start: %v", err)
	}
}

func TestWatchTellsEnds(t *testing.T) {
	e, api := newTest(t)
	for _, w := range []string{"w1", "w2", "w3"} {
		id, err := e.Create(ctx(t), spec(w))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Start(ctx(t), id); err != nil {
			t.Fatal(err)
		}
		setStatus(t, api, engine.InstanceName(w), corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	}
	events, _ := e.Watch(ctx(t), time.Now())
	next := func() engine.Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5 s")
			return engine.Event{}
		}
	}
	setStatus(t, api, "agentvisor-w1", corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}})
	if ev := next(); ev != (engine.Event{Kind: engine.EventDied, Worker: "w1", ExitCode: 3}) {
		t.Errorf("exit 3: %+v", ev)
	}
	setStatus(t, api, "agentvisor-w2", corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}})
	if ev := next(); ev.Kind != engine.EventOOM || ev.Worker != "w2" {
		t.Errorf("oom: %+v", ev)
	}
	if ev := next(); ev.Kind != engine.EventDied || ev.ExitCode != 137 {
		t.Errorf("oom's die: %+v", ev)
	}
	if err := api.CoreV1().Pods("agents").Delete(ctx(t), "agentvisor-w3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev != (engine.Event{Kind: engine.EventDied, Worker: "w3", ExitCode: exitKilled}) {
		t.Errorf("a running pod deleted by someone else: %+v", ev)
	}
	// An ended pod removed is not told twice.
	if err := e.Remove(ctx(t), engine.InstanceName("w1")); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		t.Errorf("an event for a pod told ended already: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestAnImageThatCannotStartEnds(t *testing.T) {
	e, api := newTest(t)
	id, _ := e.Create(ctx(t), spec("w1"))
	_, _ = e.Start(ctx(t), id)
	setStatus(t, api, "agentvisor-w1", corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}})
	eventually(t, "exited", func() bool {
		in, _ := e.Inspect(ctx(t), id)
		return in.State == engine.Exited && in.ExitCode == exitNeverStarted
	})
}

func TestRenameGivesThePodToAnotherWorker(t *testing.T) {
	e, _ := newTest(t)
	id, _ := e.Create(ctx(t), spec("warm1"))
	if err := e.Rename(ctx(t), id, "w9"); err != nil {
		t.Fatal(err)
	}
	in, err := e.Inspect(ctx(t), engine.InstanceName("w9"))
	// Its labels keep the worker it was made for, as a renamed
	// container's do: the reconciliation tells a hand-over by that.
	if err != nil || in.ID != id || in.Worker != "w9" || in.Labels[protocol.LabelWorkerID] != "warm1" {
		t.Fatalf("by the new worker: %+v, %v", in, err)
	}
	if _, err := e.Inspect(ctx(t), engine.InstanceName("warm1")); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("by the old worker: %v, want ErrNotFound", err)
	}
	list, _ := e.List(ctx(t), engine.Filter{})
	if len(list) != 1 || list[0].Worker != "w9" {
		t.Errorf("list: %+v", list)
	}
}

func TestNoFreezeAndRemove(t *testing.T) {
	e, _ := newTest(t)
	id, _ := e.Create(ctx(t), spec("w1"))
	if e.Suspends() {
		t.Error("Suspends: a pod cannot be frozen")
	}
	if err := e.Suspend(ctx(t), id); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("suspend: %v", err)
	}
	if err := e.Resume(ctx(t), id); err != nil {
		t.Errorf("resume of a pod that exists: %v", err)
	}
	if err := e.Remove(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gone", func() bool { _, err := e.Inspect(ctx(t), id); return errors.Is(err, engine.ErrNotFound) })
	if err := e.Remove(ctx(t), id); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("a second remove: %v", err)
	}
	// A pod made again under the same name is another incarnation: the
	// old id does not reach it.
	again, _ := e.Create(ctx(t), spec("w1"))
	if again == id {
		t.Fatalf("the same id for two incarnations: %s", id)
	}
	if err := e.Remove(ctx(t), id); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("remove by the old incarnation's id: %v", err)
	}
	if _, err := e.Inspect(ctx(t), again); err != nil {
		t.Errorf("the new incarnation: %v", err)
	}
}

func TestClaimsWithAStorageClass(t *testing.T) {
	api := newFake()
	e := New(Params{Client: api, Namespace: "agents", Prefix: "worker", StorageClass: "fast"})
	defer e.Close(context.Background())
	s := spec("w1")
	s.Mounts[1].Labels = map[string]string{protocol.LabelManaged: "true", "io.agentvisor.project_id": "p1"}
	if _, err := e.Create(ctx(t), s); err != nil {
		t.Fatal(err)
	}
	vols, err := e.Volumes(ctx(t))
	if err != nil || len(vols) != 1 || vols[0].Name != "agentvisor-claude-p1" || vols[0].Labels["io.agentvisor.project_id"] != "p1" {
		t.Fatalf("volumes: %+v, %v", vols, err)
	}
	id, _ := e.Inspect(ctx(t), engine.InstanceName("w1"))
	_, _ = e.Start(ctx(t), id.ID)
	setStatus(t, api, "agentvisor-w1", corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	eventually(t, "running", func() bool { in, _ := e.Inspect(ctx(t), id.ID); return in.State == engine.Running })
	if err := e.RemoveVolume(ctx(t), "agentvisor-claude-p1", false); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("remove a claim a running pod mounts: %v, want ErrConflict", err)
	}
	if err := e.RemoveVolume(ctx(t), "agentvisor-claude-p1", true); err != nil {
		t.Fatalf("remove it by force: %v", err)
	}
	if err := e.RemoveVolume(ctx(t), "agentvisor-claude-p1", false); err != nil {
		t.Errorf("remove a claim gone: %v", err)
	}
}

// A create whose connection breaks is made again; one the API took before
// its answer was lost is a name in use the second time (ErrConflict: the
// spawner inspects it and takes it as made).
func TestCreateRetriesWhileTheAPIDoesNotAnswer(t *testing.T) {
	e, api := newTest(t)
	fails := 2
	api.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails > 0 {
			fails--
			return true, nil, errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")
		}
		return false, nil, nil
	})
	if _, err := e.Create(ctx(t), spec("w1")); err != nil || fails != 0 {
		t.Fatalf("create across two broken connections: %v (%d failures left)", err, fails)
	}

	lost := true
	api.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lost {
			lost = false
			obj := a.(k8stesting.CreateAction).GetObject()
			if err := api.Tracker().Create(a.GetResource(), obj, a.GetNamespace()); err != nil {
				t.Fatal(err)
			}
			return true, nil, errors.New("unexpected EOF")
		}
		return false, nil, nil
	})
	if _, err := e.Create(ctx(t), spec("w2")); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("a create taken, its answer lost: %v, want ErrConflict", err)
	}
	if in, err := e.Inspect(ctx(t), engine.InstanceName("w2")); err != nil || in.Worker != "w2" {
		t.Errorf("the pod it made: %+v, %v", in, err)
	}
}

// A project volume whose name is no valid object name (a project id with
// capitals or an underscore) gets a claim of a valid name; Volumes and
// RemoveVolume speak of it by the volume's name.
func TestClaimNamesAreValid(t *testing.T) {
	api := newFake()
	e := New(Params{Client: api, Namespace: "agents", Prefix: "worker", StorageClass: "fast"})
	defer e.Close(context.Background())
	s := spec("w1")
	s.Mounts[1].Volume = "agentvisor-claude-My_Project-0a1b"
	if _, err := e.Create(ctx(t), s); err != nil {
		t.Fatal(err)
	}
	claims, _ := api.CoreV1().PersistentVolumeClaims("agents").List(ctx(t), metav1.ListOptions{})
	if len(claims.Items) != 1 || len(validation.IsDNS1123Subdomain(claims.Items[0].Name)) != 0 {
		t.Fatalf("claims: %+v", claims.Items)
	}
	vols, _ := e.Volumes(ctx(t))
	if len(vols) != 1 || vols[0].Name != "agentvisor-claude-My_Project-0a1b" {
		t.Errorf("volumes: %+v", vols)
	}
	if err := e.RemoveVolume(ctx(t), "agentvisor-claude-My_Project-0a1b", true); err != nil {
		t.Fatal(err)
	}
	if vols, _ := e.Volumes(ctx(t)); len(vols) != 0 {
		t.Errorf("after the remove: %+v", vols)
	}
}

// A network a pod cannot have is refused, not given another.
// A spec's runtime is the pod's RuntimeClass, over the engine's default.
func TestSpecRuntimeIsThePodsRuntimeClass(t *testing.T) {
	api := newFake()
	e := New(Params{Client: api, Namespace: "agents", Prefix: "worker:test", RuntimeClassName: "kata"})
	t.Cleanup(func() { e.Close(context.Background()) })
	for _, tc := range []struct{ name, runtime, want string }{
		{"w1", "", "kata"},
		{"w2", "gvisor", "gvisor"},
	} {
		s := spec(tc.name)
		s.Runtime = tc.runtime
		if _, err := e.Create(ctx(t), s); err != nil {
			t.Fatal(err)
		}
		p, err := api.CoreV1().Pods("agents").Get(ctx(t), engine.InstanceName(tc.name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != tc.want {
			t.Errorf("runtime %q: RuntimeClass %v, want %s", tc.runtime, p.Spec.RuntimeClassName, tc.want)
		}
	}
}

func TestNetworkModes(t *testing.T) {
	e, _ := newTest(t)
	s := spec("w1")
	s.Network = "none"
	if _, err := e.Create(ctx(t), s); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("network none: %v, want ErrInvalid", err)
	}
}

// A namespace the manager cannot list is an error at once, not an
// informer that never syncs.
func TestForbiddenNamespaceFailsFast(t *testing.T) {
	e, api := newTest(t)
	api.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no rights"))
	})
	if _, err := e.List(ctx(t), engine.Filter{}); !errors.Is(err, engine.ErrForbidden) {
		t.Errorf("list: %v, want ErrForbidden", err)
	}
}

// A worker that runs containers of its own is refused, with no pod made.
func TestContainersAreRefused(t *testing.T) {
	e, api := newTest(t)
	s := spec("w1")
	s.Containers = true
	_, err := e.Create(ctx(t), s)
	if !errors.Is(err, engine.ErrInvalid) || !errors.Is(err, ErrNoContainers) {
		t.Fatalf("err = %v, want ErrInvalid and ErrNoContainers", err)
	}
	if pods, _ := api.CoreV1().Pods("agents").List(ctx(t), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Fatalf("%d pods made", len(pods.Items))
	}
}

// A worker's pod removed by the worker's instance name while the
// informer's cache still holds its last incarnation (its watch broken
// and not yet relisted, as after an API server restart): the pod the API
// holds now is deleted, not left running.
func TestRemoveByWorkerWithAStaleCache(t *testing.T) {
	e, api := newTest(t)
	// The API server's uid precondition, which the fake clientset does
	// not check.
	api.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		pre := d.GetDeleteOptions().Preconditions
		if pre == nil || pre.UID == nil {
			return false, nil, nil
		}
		obj, err := api.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, d.GetNamespace(), d.GetName())
		if err == nil && obj.(*corev1.Pod).UID != *pre.UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, d.GetName(), errors.New("the uid precondition failed"))
		}
		return false, nil, nil
	})
	_, again := staleIncarnation(t, e)
	if err := e.Remove(ctx(t), engine.InstanceName("w1")); err != nil {
		t.Fatalf("remove by the worker's name: %v", err)
	}
	if p, err := api.CoreV1().Pods("agents").Get(ctx(t), "agentvisor-w1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the worker's pod %s (uid %s; %s was its new incarnation) left: %v", p.Name, p.UID, again, err)
	}
}

// A stop whose pod's end the informer does not see (its watch broken, as
// after an API server restart) ends when the API says the pod is gone,
// not after the grace and 30 s.
func TestStopSeesTheEndThroughAStaleCache(t *testing.T) {
	e, api := newTest(t)
	id, err := e.Create(ctx(t), spec("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Start(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	setStatus(t, api, "agentvisor-w1", corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	eventually(t, "running", func() bool { in, _ := e.Inspect(ctx(t), id); return in.State == engine.Running })
	// The API takes the delete and forgets the pod; no watch event comes.
	var gone atomic.Bool
	api.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gone.Store(true)
		return true, nil, nil
	})
	api.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gone.Load() {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "agentvisor-w1")
		}
		return false, nil, nil
	})
	t0 := time.Now()
	if err := e.Stop(ctx(t), id, 0); err != nil {
		t.Fatalf("stop: %v (after %s)", err, time.Since(t0).Round(time.Millisecond))
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("stop took %s", took)
	}
}

// A worker started by its instance name while the informer's cache still
// holds its earlier, gated incarnation (after an API server restart): the
// API refuses the patch's uid test, and the start lifts the gate of the
// pod the API holds, instead of failing and leaving that pod gated.
func TestStartByWorkerWithAStaleCache(t *testing.T) {
	e, api := newTest(t)
	// The API server's answer to a JSON patch whose uid test fails (422),
	// which the fake clientset does not give.
	api.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchActionImpl)
		obj, err := api.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, p.GetNamespace(), p.GetName())
		if err == nil && !strings.Contains(string(p.GetPatch()), string(obj.(*corev1.Pod).UID)) {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, p.GetName(), nil)
		}
		return false, nil, nil
	})
	stale, _ := staleIncarnation(t, e)
	if _, err := e.Start(ctx(t), engine.InstanceName("w1")); err != nil {
		t.Fatalf("start by the worker's name: %v", err)
	}
	p, err := api.CoreV1().Pods("agents").Get(ctx(t), "agentvisor-w1", metav1.GetOptions{})
	if err != nil || p.UID == stale.UID || len(p.Spec.SchedulingGates) != 0 {
		t.Fatalf("the API's pod after the start: %v, uid %s (the stale one %s), gates %v", err, p.UID, stale.UID, p.Spec.SchedulingGates)
	}
}

// staleIncarnation makes worker w1's pod, removes it, makes it again, and
// puts the first incarnation back into the informer's cache, as a cache
// behind the API server holds it: it returns that stale pod and the new
// incarnation's instance id.
func staleIncarnation(t *testing.T, e *Engine) (*corev1.Pod, string) {
	t.Helper()
	first, err := e.Create(ctx(t), spec("w1"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "cached", func() bool { _, ok := e.cached("agentvisor-w1"); return ok })
	cachedFirst, _ := e.cached("agentvisor-w1")
	stale := cachedFirst.DeepCopy()
	if err := e.Remove(ctx(t), first); err != nil {
		t.Fatal(err)
	}
	again, err := e.Create(ctx(t), spec("w1"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new incarnation cached", func() bool {
		p, ok := e.cached("agentvisor-w1")
		return ok && p.UID != stale.UID
	})
	if err := e.index.Update(stale); err != nil {
		t.Fatal(err)
	}
	return stale, again
}
