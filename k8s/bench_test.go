package k8s_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentvisor/agentvisor/protocol"
)

// BenchmarkKubernetesWorkers measures a worker-manager on the cluster of
// `make k8s` (make bench runs it with -benchtime=1x):
//
//   - create → the wrapper's started event, against a bare pod of the
//     same image made with client-go and watched to Running on the same
//     cluster (the image on the node already);
//   - a task on a hibernated worker (the wake: a new pod) → its output,
//     against the same task on a worker whose pod runs;
//   - the manager's RSS at rest with its workers made.
func BenchmarkKubernetesWorkers(b *testing.B) {
	const n = 5
	d := deploy(b, false)
	// The first create imports the worker image into the node: not timed.
	warm := d.create(protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived})
	d.waitEvent(warm, protocol.EventStarted, 2*time.Minute)

	var create, bare, wake, running []float64
	var image string
	for i := 0; i < n; i++ {
		t0 := time.Now()
		id := d.create(protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived})
		at := d.waitEvent(id, protocol.EventStarted, 2*time.Minute)
		create = append(create, ms(at.Sub(t0)))
		if image == "" {
			for _, p := range d.pods() {
				if p.Metadata.Name == "agentvisor-"+id {
					image = p.Spec.Containers[0].Image
				}
			}
		}
		// A task on the running worker, then, once the pause after its
		// output has hibernated it, the same task again: the wake.
		t1 := time.Now()
		d.run(id, "say hello", 2*time.Minute)
		running = append(running, ms(time.Since(t1)))
		d.waitStatus(id, protocol.StatusFieldState, string(protocol.WorkerHibernated), time.Minute)
		t2 := time.Now()
		d.run(id, "say hello", 3*time.Minute)
		wake = append(wake, ms(time.Since(t2)))
	}
	for i := 0; i < n; i++ {
		bare = append(bare, d.barePod(fmt.Sprintf("bare-%d", i), image))
	}
	rss := rssMB(b, d.manager.Process.Pid)

	b.ReportMetric(median(create), "k8s-create-to-started-median-ms")
	b.ReportMetric(median(bare), "baseline-k8s-bare-pod-running-median-ms")
	b.ReportMetric(median(wake), "k8s-wake-task-median-ms")
	b.ReportMetric(median(running), "baseline-k8s-running-task-median-ms")
	b.ReportMetric(rss, "k8s-manager-rss-MB")
	b.Logf("create → started %v ms; bare pod → Running %v ms; task on a hibernated worker %v ms, on a running one %v ms; manager RSS %.1f MB (%d workers)",
		create, bare, wake, running, rss, n+1)
}

// waitEvent waits for a worker's lifecycle event and returns its time.
func (d *deployment) waitEvent(worker string, ev protocol.Event, within time.Duration) time.Time {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, m := range d.rc.XRange(context.Background(), d.keys.Lifecycle(), "-", "+").Val() {
			data, _ := protocol.EntryData(m.Values)
			l, err := protocol.DecodeLifecycle(data)
			if err == nil && l.WorkerID == worker && l.Event == ev {
				return l.Timestamp
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatalf("no %s event of %s within %s", ev, worker, within)
	return time.Time{}
}

// barePod makes a pod of image that sleeps with client-go (as the
// engine does), watches it until it runs and returns how long that took;
// the pod goes.
func (d *deployment) barePod(name, image string) float64 {
	d.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", d.env["KUBECONFIG"])
	if err != nil {
		d.t.Fatal(err)
	}
	api, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods := api.CoreV1().Pods(d.ns)
	// One call first, so that the connection is open as the engine's is.
	if _, err := pods.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		d.t.Fatal(err)
	}
	uid, no := int64(1000), false
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, HostNetwork: true,
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid},
			Containers:      []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"/bin/sleep", "600"}}}}}
	t0 := time.Now()
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		d.t.Fatal(err)
	}
	defer w.Stop()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		d.t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
			break
		}
	}
	took := ms(time.Since(t0))
	if ctx.Err() != nil {
		d.t.Fatalf("bare pod %s: not running within 2 min", name)
	}
	grace := int64(0)
	_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	return took
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// rssMB is a process's resident set in MB.
func rssMB(tb testing.TB, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// BenchmarkKubernetesAtRest: a worker-manager with 100 workers made, at
// rest: its RSS (against the same process before its first worker) and
// the requests it makes of the API server per second (counted in the API
// server's audit log over 30 s, by the manager's service account): an
// informer's watch, not a poll, so none are expected.
func BenchmarkKubernetesAtRest(b *testing.B) {
	const n = 100
	// The default heartbeat (10 s): 100 wrappers starting on 2 cores are
	// slow to make their first beat. Each pod asks for a tenth of its
	// 0.15 core: 100 fit the node's 2.
	d := deployWith(b, false, map[string]string{"MAX_CONCURRENT_WORKERS": "110", "HEARTBEAT_INTERVAL": "10s"})
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived,
		Limits: protocol.Limits{Memory: "256m", CPUs: 0.15}}
	first := d.create(spec) // imports the image
	d.waitEvent(first, protocol.EventStarted, 2*time.Minute)
	time.Sleep(5 * time.Second)
	before := rssMB(b, d.manager.Process.Pid)

	ids := make(chan string, n)
	sem := make(chan struct{}, 4)
	for i := 1; i < n; i++ {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			ids <- d.create(spec)
		}()
	}
	var made []string
	for i := 1; i < n; i++ {
		made = append(made, <-ids)
	}
	for _, id := range made {
		d.waitEvent(id, protocol.EventStarted, 5*time.Minute)
	}
	time.Sleep(15 * time.Second) // settled: every pod started, its status reported
	t0, c0 := time.Now(), d.apiRequests()
	if c0 < n {
		b.Fatalf("%d requests of the manager in the audit log after %d creates: the count would prove nothing", c0, n)
	}
	time.Sleep(30 * time.Second)
	perSecond := float64(d.apiRequests()-c0) / time.Since(t0).Seconds()
	after := rssMB(b, d.manager.Process.Pid)
	if ps := d.pods(); len(ps) != n {
		b.Fatalf("%d pods for %d workers", len(ps), n)
	}
	b.ReportMetric(after, "k8s-100-manager-rss-MB")
	b.ReportMetric(before, "baseline-k8s-1-manager-rss-MB")
	b.ReportMetric(perSecond, "k8s-100-api-requests-per-s")
	b.Logf("100 workers: manager RSS %.1f MB (%.1f MB with one), %.2f API requests/s at rest", after, before, perSecond)
}

// apiRequests counts the requests the deployment's managers made of the
// API server so far (the audit log's entries of their user).
func (d *deployment) apiRequests() int {
	data, err := os.ReadFile(d.env["AUDIT_LOG"])
	if err != nil {
		d.t.Fatalf("the API server's audit log (make k8s writes it): %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, `"username":"`+d.user+`"`) && strings.Contains(line, `"stage":"ResponseComplete"`) {
			n++
		}
	}
	return n
}
