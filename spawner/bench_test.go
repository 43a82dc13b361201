package spawner

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

func p99(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*0.99)]
}

// waitEvents waits for lifecycle events of a worker after the entry id
// from, each once, in any order (a wrapper's task_started may come
// before the spawner's created event of its container), and returns when
// each was read.
func (f *fixture) waitEvents(tb testing.TB, from, worker string, timeout time.Duration, evs ...protocol.Event) map[protocol.Event]time.Time {
	tb.Helper()
	at := map[protocol.Event]time.Time{}
	deadline := time.Now().Add(timeout)
	for len(at) < len(evs) && time.Now().Before(deadline) {
		res, err := f.rc.XRead(context.Background(), &redis.XReadArgs{Streams: []string{f.keys.Lifecycle(), from}, Block: time.Second}).Result()
		if err != nil {
			continue
		}
		for _, m := range res[0].Messages {
			from = m.ID
			data, _ := protocol.EntryData(m.Values)
			if l, err := protocol.DecodeLifecycle(data); err == nil && l.WorkerID == worker && slices.Contains(evs, l.Event) && at[l.Event].IsZero() {
				at[l.Event] = time.Now()
			}
		}
	}
	if len(at) < len(evs) {
		tb.Fatalf("of %v of %s, only %v within %v", evs, worker, at, timeout)
	}
	return at
}

// waitEvent waits for a lifecycle event of a worker after the entry id
// from, and returns when it was read.
func (f *fixture) waitEvent(tb testing.TB, from, worker string, ev protocol.Event, timeout time.Duration) time.Time {
	tb.Helper()
	return f.waitEvents(tb, from, worker, timeout, ev)[ev]
}

func lastID(rc *redis.Client, stream string) string {
	if msgs, err := rc.XRevRangeN(context.Background(), stream, "+", "-", 1).Result(); err == nil && len(msgs) == 1 {
		return msgs[0].ID
	}
	return "0"
}

// idle waits until a worker has no task in flight.
func idle(tb testing.TB, f *fixture, id string) {
	tb.Helper()
	testkit.Eventually(tb, id+" idle", time.Minute, func() bool {
		return f.rc.HGet(context.Background(), f.keys.Status(id), protocol.StatusFieldRequestID).Val() == ""
	})
}

// pauseWakes is how many times BenchmarkWorkerLifecycle pauses each of
// its 5 workers and wakes it with a task, each way (settled, just
// paused); each pause is also unpaused bare once.
const pauseWakes = 4

// BenchmarkWorkerLifecycle: create → the wrapper's started event, against
// a bare `docker run` of the same image until its first output line;
// wake from pause (task XADD → task started) against a bare unpause, and
// their ratio (the pause fast path), and the same wake of a worker just
// paused; crash → failed Output.
func BenchmarkWorkerLifecycle(b *testing.B) {
	f := newFixture(b, nil)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = (&Manager{S: f.s}).Run(cctx) }()
	defer func() { cancel(); <-done }()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	img, err := f.s.images.EnsureImage(ctx, spec.AgentType, nil)
	if err != nil {
		b.Fatal(err)
	}
	var create, bare, unpause, justPaused, bareUnpause, crash []float64
	for i := 0; i < 5; i++ {
		from := lastID(f.rc, f.keys.Lifecycle())
		t0 := time.Now()
		info, err := f.s.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		at := f.waitEvent(b, from, info.WorkerID, protocol.EventStarted, time.Minute)
		create = append(create, float64(at.Sub(t0).Milliseconds()))

		// The same image, bare: until its first output line.
		name := fmt.Sprintf("bench-bare-%d", time.Now().UnixNano())
		cmd := exec.Command("docker", "run", "--rm", "--name", name, "--network", "host", "-e", "WORKER_ID="+name,
			"-e", "REDIS_URL="+f.s.cfg.RedisURL, "-e", "AGENT_TYPE=claude", img.Tag)
		stderr, _ := cmd.StderrPipe()
		t0 = time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := stderr.Read(buf); err != nil {
			b.Fatal(err)
		}
		bare = append(bare, float64(time.Since(t0).Milliseconds()))
		exec.Command("docker", "rm", "-f", name).Run()
		cmd.Wait()

		// Pause, then a task: until the wrapper starts it; then a bare
		// unpause of the same container. Several of each per worker, for
		// the p99s. A task that comes within wakeInterval of the pause
		// may find the wake loop blocked on a read that does not watch
		// the worker yet: that case is timed apart (just paused) from a
		// task that comes once the loop watches it (settled), as tasks
		// to a worker paused when idle do.
		for j := 0; j < 2*pauseWakes; j++ {
			idle(b, f, info.WorkerID)
			if err := f.s.Pause(ctx, info.WorkerID); err != nil {
				b.Fatal(err)
			}
			settled := j%2 == 0
			if settled {
				time.Sleep(2 * wakeInterval)
			}
			req := fmt.Sprintf("u-%d-%d", i, j)
			from = lastID(f.rc, f.keys.Lifecycle())
			t0 = time.Now()
			f.send(nil, f.keys.Input(info.WorkerID), protocol.Task{RequestID: req, Prompt: "go"})
			at = f.waitEvent(b, from, info.WorkerID, protocol.EventTaskStarted, time.Minute)
			if settled {
				unpause = append(unpause, float64(at.Sub(t0).Microseconds())/1000)
			} else {
				justPaused = append(justPaused, float64(at.Sub(t0).Microseconds())/1000)
			}
			f.waitOutput(b, f.keys.Output(info.WorkerID), req, time.Minute)
			// Paused through the spawner, which tolerates the manager
			// pausing it at the same moment on the wrapper's request.
			idle(b, f, info.WorkerID)
			if err := f.s.Pause(ctx, info.WorkerID); err != nil {
				b.Fatal(err)
			}
			c, _ := f.s.find(ctx, info.WorkerID)
			t0 = time.Now()
			if err := f.dc.ContainerUnpause(ctx, c.ID); err != nil {
				b.Fatal(err)
			}
			bareUnpause = append(bareUnpause, float64(time.Since(t0).Microseconds())/1000)
		}

		// Crash mid-task: until the failed Output is readable.
		f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "slow", DelayMS: 60000}}})
		req := fmt.Sprintf("k-%d", i)
		idle(b, f, info.WorkerID)
		f.s.Unpause(ctx, info.WorkerID)
		f.send(nil, f.keys.Input(info.WorkerID), protocol.Task{RequestID: req, Prompt: "slow"})
		testkit.Eventually(b, "task running", time.Minute, func() bool {
			return f.rc.HGet(ctx, f.keys.Status(info.WorkerID), protocol.StatusFieldRequestID).Val() == req
		})
		t0 = time.Now()
		exec.Command("docker", "kill", "-s", "KILL", ContainerName(info.WorkerID)).Run()
		f.waitOutput(b, f.keys.Output(info.WorkerID), req, 30*time.Second)
		crash = append(crash, float64(time.Since(t0).Milliseconds()))
		f.stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"}})
	}
	b.ReportMetric(median(create), "create-to-started-median-ms")
	b.ReportMetric(median(bare), "bare-docker-run-first-line-median-ms")
	b.ReportMetric(median(create)/median(bare), "create-ratio")
	b.ReportMetric(p99(unpause), "unpause-to-pickup-p99-ms")
	b.ReportMetric(p99(bareUnpause), "bare-unpause-p99-ms")
	b.ReportMetric(p99(unpause)/p99(bareUnpause), "unpause-ratio")
	b.ReportMetric(p99(justPaused), "unpause-just-paused-to-pickup-p99-ms")
	b.ReportMetric(p99(crash), "crash-to-failed-output-max-ms")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
