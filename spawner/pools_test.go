package spawner

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestParsePools(t *testing.T) {
	ps, err := ParsePools([]byte(`[{"name":"claude-git","spec":{"agent_type":"claude","capabilities":["GIT"]},"min_warm":2,"max_total":4,"recycle_after":10},
		{"name":"devs","spec":{"agent_type":"droid","kind":"developer"},"size":3}]`))
	if err != nil || len(ps) != 2 || ps[1].MaxTotal != 3 {
		t.Fatalf("%+v %v", ps, err)
	}
	// A create's spec matches a template whatever the spelling of its
	// capabilities.
	s := &Spawner{cfg: Config{Pools: ps}}
	if p := s.poolFor(protocol.WorkerSpec{AgentType: protocol.AgentClaude, Capabilities: []protocol.Capability{"GIT"}}); p == nil || p.Name != "claude-git" {
		t.Fatalf("poolFor: %+v", p)
	}
	if p := s.poolFor(protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "x"}); p != nil {
		t.Fatalf("a different spec matched %s", p.Name)
	}
	for _, bad := range []string{
		`[{"name":"a b","spec":{"agent_type":"claude"},"min_warm":1}]`,
		`[{"name":"a","spec":{"agent_type":"gpt"},"min_warm":1}]`,
		`[{"name":"a","spec":{"agent_type":"claude"},"min_warm":3,"max_total":2}]`,
		`[{"name":"a","spec":{"agent_type":"claude","kind":"developer"},"min_warm":1}]`,
		`[{"name":"a","spec":{"agent_type":"claude"},"min_warm":1},{"name":"a","spec":{"agent_type":"claude"},"size":1}]`,
		`[{"name":"a","spec":{"agent_type":"claude"},"warm":1}]`,
	} {
		if _, err := ParsePools([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// A warm pool fills to min_warm; a matching create is served from it (no
// container made) and the pool refills; an allocated worker that served
// recycle_after tasks is retired and replaced; a warm worker that dies is
// replaced; a pool of fixed size keeps its developers running.
func TestWarmPoolAndPoolSize(t *testing.T) {
	buildBenchBase(t)
	warmSpec := fakeSpec
	devSpec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindDeveloper}
	f := newFixture(t, func(c *Config) {
		useFakeAgent(c)
		c.MaxWorkers = 6
		c.Pools = []PoolTemplate{{Name: "warm", Spec: warmSpec, MinWarm: 2, MaxTotal: 3, RecycleAfter: 2, key: specKey(warmSpec)},
			{Name: "devs", Spec: devSpec, Size: 2, MaxTotal: 2, key: specKey(devSpec)}}
		c.ReplaceBackoff = 10 * time.Millisecond
	})
	c := f.startManager(t)
	ctx := context.Background()
	pool := func(name string) PoolStatus {
		ps, err := f.s.Pools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Name == name {
				return p
			}
		}
		t.Fatalf("no pool %s", name)
		return PoolStatus{}
	}
	testkit.Eventually(t, "two warm workers", time.Minute, func() bool { return pool("warm").Warm == 2 })
	testkit.Eventually(t, "two developers", time.Minute, func() bool { return pool("devs").Members == 2 })
	// What workerctl pools shows, from Redis alone.
	testkit.Eventually(t, "the pools published", 10*time.Second, func() bool {
		ps, err := ListPools(ctx, f.rc, f.keys)
		return err == nil && len(ps) == 2 && ps[1].Name == "warm" && ps[1].Warm == 2 && ps[1].MinWarm == 2 && ps[0].Members == 2
	})
	warm, _ := f.s.rdb.Warm(ctx, "warm")

	r, err := c.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &warmSpec})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(warm, r.WorkerID) || r.Worker.Status != protocol.ContainerRunning {
		t.Fatalf("the create got %s (%s), not one of the warm %v", r.WorkerID, r.Worker.Status, warm)
	}
	if n := f.countEvents(t, r.WorkerID, protocol.EventAllocated); n != 1 {
		t.Fatalf("%d allocated events", n)
	}
	testkit.Eventually(t, "the pool refilled", time.Minute, func() bool { p := pool("warm"); return p.Warm == 2 && p.Allocated == 1 })

	// Two tasks: the worker is recycled and replaced, the second output
	// served.
	for _, req := range []string{"pool-1", "pool-2"} {
		f.send(t, f.keys.Input(r.WorkerID), protocol.Task{RequestID: req, Prompt: "small"})
		if o := f.waitOutput(t, f.keys.Output(r.WorkerID), req, 30*time.Second); o.Status != protocol.StatusComplete {
			t.Fatalf("%s: %+v", req, o)
		}
	}
	var repl string
	testkit.Eventually(t, "recycled and replaced", time.Minute, func() bool {
		repl = f.rc.HGet(ctx, f.keys.Status(r.WorkerID), protocol.StatusFieldReplacedBy).Val()
		return repl != ""
	})
	if p := pool("warm"); p.Recycles != 1 || p.Allocations != 1 {
		t.Errorf("pool figures %+v", p)
	}
	f.send(t, f.keys.Input(repl), protocol.Task{RequestID: "pool-3", Prompt: "small"})
	if o := f.waitOutput(t, f.keys.Output(repl), "pool-3", 30*time.Second); o.Status != protocol.StatusComplete {
		t.Fatalf("the replacement: %+v", o)
	}

	// A warm worker that dies is replaced.
	warm, _ = f.s.rdb.Warm(ctx, "warm")
	if out, err := exec.Command("docker", "kill", ContainerName(warm[0])).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	testkit.Eventually(t, "the dead warm worker replaced", time.Minute, func() bool {
		w, _ := f.s.rdb.Warm(ctx, "warm")
		return len(w) == 2 && !slices.Contains(w, warm[0])
	})
	// So is a developer of the fixed-size pool.
	var dev string
	_ = f.s.eachWorker(ctx, func(ctx context.Context, id string) {
		if f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldPool).Val() == "devs" {
			dev = id
		}
	})
	exec.Command("docker", "kill", ContainerName(dev)).Run()
	testkit.Eventually(t, "the developer replaced", time.Minute, func() bool {
		member, _ := f.s.rdb.IsWorker(ctx, dev)
		return !member && pool("devs").Members == 2
	})
}
