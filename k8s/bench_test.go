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

	"github.com/agentvisor/agentvisor/protocol"
)

// BenchmarkKubernetesWorkers measures a worker-manager on the cluster of
// `make k8s` (make bench runs it with -benchtime=1x):
//
//   - create → the wrapper's started event, against a bare pod of the
//     same image made and watched to Running by the same cluster
//     (kubectl apply, then its watch; the same image is on the node);
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

// barePod makes a pod of image that sleeps, waits until it runs (the
// watch of kubectl wait) and returns how long that took; the pod goes.
func (d *deployment) barePod(name, image string) float64 {
	d.t.Helper()
	manifest := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q},
"spec":{"restartPolicy":"Never","automountServiceAccountToken":false,"hostNetwork":true,
"securityContext":{"runAsUser":1000,"runAsNonRoot":true},
"containers":[{"name":"c","image":%q,"imagePullPolicy":"Never","command":["/bin/sleep","600"]}]}}`, name, d.ns, image)
	t0 := time.Now()
	kubectl(d.t, d.env, []byte(manifest), "create", "-f", "-")
	kubectl(d.t, d.env, nil, "wait", "--for=jsonpath={.status.phase}=Running", "pod/"+name, "-n", d.ns, "--timeout=2m")
	took := ms(time.Since(t0))
	kubectl(d.t, d.env, nil, "delete", "pod", name, "-n", d.ns, "--grace-period=0", "--force")
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
