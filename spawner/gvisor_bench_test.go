package spawner

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// taskTime sends one task to worker id and returns task XADD → its Output.
func (f *fixture) taskTime(b *testing.B, id, prompt string) time.Duration {
	b.Helper()
	ctx := context.Background()
	out := f.keys.Output(id)
	last := lastID(f.rc, out)
	req := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	t0 := time.Now()
	f.send(b, f.keys.Input(id), protocol.Task{RequestID: req, Prompt: prompt, ForceNewSession: true})
	for {
		res, err := f.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{out, last}, Block: 2 * time.Minute}).Result()
		if err != nil {
			b.Fatalf("the output of %s: %v", req, err)
		}
		for _, m := range res[0].Messages {
			last = m.ID
			data, _ := protocol.EntryData(m.Values)
			if o, err := protocol.DecodeOutput(data); err == nil && o.RequestID == req {
				if o.Status != protocol.StatusComplete {
					b.Fatalf("task %s: %s %+v", req, o.Status, o.Error)
				}
				return time.Since(t0)
			}
		}
	}
}

// BenchmarkGVisorWorker: what gVisor costs a sealed worker, against the
// same sealed worker under runc, alternating in one run (the fake agent:
// the runtime is measured, not the CLI). Per runtime: create → the
// wrapper's started event (median of 7), one task's XADD → Output
// (median of 5 tasks on each of the 7 workers), and the memory of the idle
// worker as its container's memory cgroup counts it (for runsc that holds
// the sandbox and its gofer: gVisor's kernel is in it), median of 7.
func BenchmarkGVisorWorker(b *testing.B) {
	buildBenchBase(b)
	f := newFixture(b, func(c *Config) {
		useFakeAgent(c)
		c.WorkerEnv["PAUSE_AFTER_OUTPUT"] = "false"
		c.IdleTimeout = time.Hour
	})
	ctx := context.Background()
	type figures struct{ create, task, memory []float64 }
	got := map[protocol.Runtime]*figures{protocol.RuntimeRunc: {}, protocol.RuntimeGVisor: {}}
	round := func(rt protocol.Runtime, keep bool) {
		testkit.Eventually(b, "the spare namespaces", time.Minute, f.s.dockerEngine().SparesSettled)
		from := lastID(f.rc, f.keys.Lifecycle())
		t0 := time.Now()
		info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: fakeSpec.AgentType, Runtime: rt})
		if err != nil {
			b.Fatal(err)
		}
		at := f.waitEvent(b, from, info.WorkerID, protocol.EventStarted, time.Minute)
		defer f.s.Delete(ctx, info.WorkerID)
		var tasks []float64
		for i := 0; i < 5; i++ {
			tasks = append(tasks, ms(f.taskTime(b, info.WorkerID, "fake:stamp")))
		}
		idle(b, f, info.WorkerID)
		time.Sleep(2 * time.Second) // the last task's processes gone, the wrapper idle
		c, err := f.dc.ContainerInspect(ctx, ContainerName(info.WorkerID))
		if err != nil {
			b.Fatal(err)
		}
		if want := map[protocol.Runtime]string{protocol.RuntimeGVisor: "runsc", protocol.RuntimeRunc: "runc"}[rt]; c.HostConfig.Runtime != want {
			b.Fatalf("runtime %s: the container's is %q, want %q", rt, c.HostConfig.Runtime, want)
		}
		mem := cgroupMemory(b, c.ID)
		if keep {
			g := got[rt]
			g.create = append(g.create, ms(at.Sub(t0)))
			g.task = append(g.task, median(tasks))
			g.memory = append(g.memory, mem/(1<<20))
		}
	}
	f.s.engine.Prepare()
	round(protocol.RuntimeGVisor, false) // images built, caches warm
	round(protocol.RuntimeRunc, false)
	for i := 0; i < 7; i++ {
		round(protocol.RuntimeGVisor, true)
		round(protocol.RuntimeRunc, true)
	}
	g, r := got[protocol.RuntimeGVisor], got[protocol.RuntimeRunc]
	b.ReportMetric(median(g.create), "gvisor-create-to-started-median-ms")
	b.ReportMetric(median(r.create), "runc-create-to-started-median-ms")
	b.ReportMetric(median(g.task), "gvisor-fake-task-median-ms")
	b.ReportMetric(median(r.task), "runc-fake-task-median-ms")
	b.ReportMetric(median(g.memory), "gvisor-idle-worker-memory-MB")
	b.ReportMetric(median(r.memory), "runc-idle-worker-memory-MB")
	b.Logf("create ms gvisor %v runc %v; task ms gvisor %v runc %v; idle MB gvisor %v runc %v", g.create, r.create, g.task, r.task, g.memory, r.memory)
}

// BenchmarkGVisorRealClaude: one real claude task (against the stub
// model, the default 0.5 CPU) in a sealed worker under gVisor against the
// same worker under runc, alternating, median of 7 each: what the agent's
// own start (a Node.js program reading thousands of files) pays for
// gVisor's kernel.
func BenchmarkGVisorRealClaude(b *testing.B) {
	if _, err := exec.LookPath("claude"); err != nil {
		b.Fatalf("the real claude CLI is not installed (run `make setup`): %v", err)
	}
	f := newFixture(b, func(c *Config) {
		c.WorkerEnv = map[string]string{"PAUSE_AFTER_OUTPUT": "false"}
		c.IdleTimeout = time.Hour
	})
	ctx := context.Background()
	ids := map[protocol.Runtime]string{}
	for _, rt := range []protocol.Runtime{protocol.RuntimeGVisor, protocol.RuntimeRunc} {
		info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Runtime: rt})
		if err != nil {
			b.Fatal(err)
		}
		defer f.s.Delete(ctx, info.WorkerID)
		ids[rt] = info.WorkerID
	}
	var g, r []float64
	for i := -1; i < 7; i++ { // the first round warms both up
		dg := f.taskTime(b, ids[protocol.RuntimeGVisor], "do it")
		dr := f.taskTime(b, ids[protocol.RuntimeRunc], "do it")
		if i >= 0 {
			g, r = append(g, ms(dg)), append(r, ms(dr))
		}
	}
	b.ReportMetric(median(g), "gvisor-claude-task-median-ms")
	b.ReportMetric(median(r), "runc-claude-task-median-ms")
	b.Logf("claude task ms gvisor %v runc %v", g, r)
}
