package spawner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// BenchmarkCancelInWorker measures a cancel where workers run: a sealed
// worker container made by the spawner at the default limits (0.5 CPU),
// the real claude against the stub model, whose answer to each task is
// held back a minute. The worker is fresh: its first task, cancelled, is
// also the first claude run in the container. Once the model got a task's
// request, a cancel document goes on the worker's input the way any
// consumer sends it (one XADD); the figure is that XADD → the cancelled
// Output readable, the median and the max (a bound on the p99) of 10
// cancels, with a claude process per task and with the persistent one
// (AGENT_PERSISTENT). After the cancels, a task of the same project must
// resume the session with every cancelled task's prompt in it.
func BenchmarkCancelInWorker(b *testing.B) {
	f := newFixture(b, nil)
	if f.s.cfg.CPULimit != 0.5 {
		b.Fatalf("WORKER_CPU_LIMIT is %g: this benchmark measures the default, 0.5", f.s.cfg.CPULimit)
	}
	for _, persistent := range []bool{false, true} {
		ms := f.cancelRounds(b, persistent, 10)
		name := "per-task"
		if persistent {
			name = "persistent"
		}
		b.ReportMetric(median(ms), "cancel-worker-"+name+"-p50-ms")
		b.ReportMetric(slices.Max(ms), "cancel-worker-"+name+"-p99-ms")
	}
}

// cancelRounds creates a worker (persistent or not), cancels n running
// tasks of one project on it, checks that the session lived on, and
// returns the cancel times in ms.
func (f *fixture) cancelRounds(b *testing.B, persistent bool, n int) []float64 {
	ctx := context.Background()
	// No manager runs: nothing pauses the worker between tasks.
	f.s.cfg.WorkerEnv = map[string]string{"PAUSE_AFTER_OUTPUT": "false", "AGENT_PERSISTENT": fmt.Sprint(persistent)}
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		b.Fatal(err)
	}
	defer f.s.Delete(ctx, info.WorkerID)
	in, out := f.keys.Input(info.WorkerID), f.keys.Output(info.WorkerID)
	project := fmt.Sprintf("bench-cancel-%v", persistent)
	last := "0-0"
	result := func(id string, want protocol.OutputStatus) protocol.Output {
		res, err := f.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{out, last}, Block: 2 * time.Minute}).Result()
		if err != nil {
			b.Fatalf("output of %s: %v", id, err)
		}
		m := res[0].Messages[0]
		last = m.ID
		data, _ := protocol.EntryData(m.Values)
		o, err := protocol.DecodeOutput(data)
		if err != nil || o.RequestID != id || o.Status != want {
			b.Fatalf("output %s (%v), want %s %s", data, err, id, want)
		}
		return o
	}
	f.stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}", DelayMS: 60_000}})
	var ms []float64
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%d", project, i)
		marker := "BENCH-CANCEL-" + id
		f.send(b, in, protocol.Task{RequestID: id, ProjectID: project, Prompt: marker})
		testkit.Eventually(b, "the model's request", time.Minute, func() bool {
			reqs := f.stub.Requests()
			return len(reqs) > 0 && strings.Contains(reqs[len(reqs)-1].Text(), marker)
		})
		doc, _ := protocol.NewCancel(id, "bench").Encode()
		t0 := time.Now()
		if err := f.rc.XAdd(ctx, &redis.XAddArgs{Stream: in, Values: protocol.Values(doc)}).Err(); err != nil {
			b.Fatal(err)
		}
		result(id, protocol.StatusCancelled)
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
	}
	// The session lived through the cancels: the next task resumes it,
	// its model request carrying the cancelled tasks' prompts.
	f.stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"}})
	f.send(b, in, protocol.Task{RequestID: project + "-next", ProjectID: project, Prompt: "next"})
	result(project+"-next", protocol.StatusComplete)
	reqs := f.stub.Requests()
	text := reqs[len(reqs)-1].Text()
	for i := 0; i < n; i++ {
		if !strings.Contains(text, fmt.Sprintf("BENCH-CANCEL-%s-%d", project, i)) {
			b.Fatalf("the session lost cancelled task %d: the next task's request lacks its prompt", i)
		}
	}
	return ms
}
