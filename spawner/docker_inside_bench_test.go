package spawner

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// BenchmarkDockerInside: create → the wrapper's started event of a
// sealed DOCKER worker against a plain sealed one, alternating; and a
// `docker run --rm` of a small image (FROM scratch, a static binary) by
// the worker's own engine, timed inside the worker, against the same run
// on the host's engine (--network none), alternating in rounds.
func BenchmarkDockerInside(b *testing.B) {
	f := newFixture(b, nil) // sealed, with the fixture's gateway
	ctx := context.Background()
	plain := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	docker := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Capabilities: []protocol.Capability{protocol.CapDocker}}
	startOf := func(spec protocol.WorkerSpec, keep bool) (float64, string) {
		from := lastID(f.rc, f.keys.Lifecycle())
		t0 := time.Now()
		info, err := f.s.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		at := f.waitEvent(b, from, info.WorkerID, protocol.EventStarted, time.Minute)
		if !keep {
			if err := f.s.Delete(ctx, info.WorkerID); err != nil {
				b.Fatal(err)
			}
		}
		return float64(at.Sub(t0).Milliseconds()), info.WorkerID
	}
	startOf(docker, false) // images built, caches warm
	startOf(plain, false)
	var d, p []float64
	for i := 0; i < 7; i++ {
		ms, _ := startOf(docker, false)
		d = append(d, ms)
		ms, _ = startOf(plain, false)
		p = append(p, ms)
	}
	b.ReportMetric(median(d), "docker-create-to-started-median-ms")
	b.ReportMetric(median(p), "plain-create-to-started-median-ms")

	probe := buildInnerProbe(b)
	_, id := startOf(docker, true)
	b.Cleanup(func() { _ = f.s.Delete(context.WithoutCancel(ctx), id) })
	copyToWorker(b, id, probe)
	if out, err := inWorker(b, id, "docker build -q -t inner-probe:1 /home/worker/inner", 3*time.Minute); err != nil {
		b.Fatalf("docker build in the worker: %v\n%s", err, out)
	}
	hostTag := fmt.Sprintf("agentvisor-bench-inner-probe:%d", time.Now().UnixNano())
	if out, err := exec.Command("docker", "build", "-q", "--label", protocol.LabelKeyPrefix+"="+f.keys.Prefix, "-t", hostTag, probe).CombinedOutput(); err != nil {
		b.Fatalf("docker build on the host: %v\n%s", err, out)
	}
	b.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", hostTag).Run() })
	const runs = 3
	var inner, host []float64
	for round := 0; round < 4; round++ {
		out, err := inWorker(b, id, fmt.Sprintf(`for i in $(seq %d); do s=$(date +%%s%%N); docker run --rm inner-probe:1 >/dev/null 2>&1 || exit 1; echo $(( ($(date +%%s%%N) - s) / 1000000 )); done`, runs), 2*time.Minute)
		if err != nil {
			b.Fatalf("docker run in the worker: %v\n%s", err, out)
		}
		for _, l := range strings.Fields(out) {
			v, err := strconv.ParseFloat(l, 64)
			if err != nil {
				b.Fatalf("inner run time %q: %s", l, out)
			}
			inner = append(inner, v)
		}
		for i := 0; i < runs; i++ {
			t0 := time.Now()
			if out, err := exec.Command("docker", "run", "--rm", "--network", "none", hostTag).CombinedOutput(); err != nil {
				b.Fatalf("docker run on the host: %v\n%s", err, out)
			}
			host = append(host, float64(time.Since(t0).Milliseconds()))
		}
	}
	b.ReportMetric(median(inner), "inner-docker-run-median-ms")
	b.ReportMetric(median(host), "host-docker-run-median-ms")
}
