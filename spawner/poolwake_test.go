package spawner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// A hibernated worker whose spec is a warm pool's wakes in a warm worker
// of that pool: no container is made for the wake (the woken worker's
// container is one the pool made before the task came), the task is
// answered under the hibernated worker's id, in its next incarnation, and
// the warm worker's identity is gone (not listed, no Redis user, its
// socket directory renamed). A gateway credential for the woken worker
// alone is in its wrapper's CREDENTIAL_HOSTS from the wake on.
func TestWakeTakesAWarmPoolWorker(t *testing.T) {
	buildBenchBase(t)
	gwDir := gatewaytest.Dir(t)
	f := newFixture(t, func(c *Config) {
		useFakeAgent(c)
		c.WorkerEnv["FAKE_AGENT_MODES"] = "fake:git-config" // each result: the git configuration the agent was given
		c.Pools = []PoolTemplate{{Name: "warm", Spec: fakeSpec, MinWarm: 1, MaxTotal: 4, RecycleAfter: 100, key: specKey(fakeSpec)}}
		c.GatewayDir = gwDir
	})
	credFile := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(credFile, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := gatewaytest.Start(t, gateway.Config{Dir: gwDir, Redis: f.rc.Options().Addr, Model: f.stub.URL, CredentialsFile: credFile})
	f.startManager(t)
	ctx := context.Background()
	warmOnes := func() []string { ids, _ := f.s.rdb.Warm(ctx, "warm"); return ids }
	testkit.Eventually(t, "a warm worker", time.Minute, func() bool { return len(warmOnes()) == 1 })
	// A worker of the pool's spec, made cold (the warm one is left for
	// the wake), hibernated.
	id := hibernatedWorker(t, f, fakeSpec)
	creds := `[{"host": "git.example.com", "value": "token only-for-the-woken", "workers": ["` + id + `"]}]`
	if err := os.WriteFile(credFile, []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := gw.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	// Ready: offered, and its status names its container (under a full
	// run's load the offer can be seen before that write).
	var warm string
	if !testkit.Poll(time.Minute, 100*time.Millisecond, func() bool {
		ids := warmOnes()
		if len(ids) != 1 {
			return false
		}
		warm = ids[0]
		return f.rc.HGet(ctx, f.keys.Status(warm), protocol.StatusFieldContainerID).Val() != ""
	}) {
		var states []string
		for _, w := range warmOnes() {
			states = append(states, fmt.Sprintf("%s %v", w, f.rc.HGetAll(ctx, f.keys.Status(w)).Val()))
		}
		t.Fatalf("no warm worker ready in a minute; the pool offers %d: %v; containers %v", len(states), states, containersOf(t, f))
	}
	before := map[string]bool{}
	for _, c := range containersOf(t, f) {
		before[c] = true
	}
	warmContainer := f.rc.HGet(ctx, f.keys.Status(warm), protocol.StatusFieldContainerID).Val()

	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "wake-warm", Prompt: "hello"})
	o := f.waitOutput(t, f.keys.Output(id), "wake-warm", time.Minute)
	if o.Status != protocol.StatusComplete || o.WorkerID != id {
		t.Fatalf("the task that woke it: %+v %+v", o, o.Error)
	}
	st := f.rc.HGetAll(ctx, f.keys.Status(id)).Val()
	if st[protocol.StatusFieldIncarnation] != "2" || st[protocol.StatusFieldContainerID] != warmContainer {
		t.Fatalf("after the wake: incarnation %q, container %.12s; want 2 and the warm worker's %.12s",
			st[protocol.StatusFieldIncarnation], st[protocol.StatusFieldContainerID], warmContainer)
	}
	c, err := f.s.inst.find(ctx, id)
	if err != nil || !before[c.ID[:12]] {
		t.Fatalf("the woken worker's container %v (%v) was not one of those before the task", c.ID, err)
	}
	if n := f.countEvents(t, id, protocol.EventCreated); n != 2 {
		t.Errorf("%d created events, want 2 (the create, the wake)", n)
	}
	testkit.Eventually(t, "the warm worker forgotten", 45*time.Second, func() bool {
		return f.rc.Exists(ctx, f.keys.Status(warm)).Val() == 0
	})
	listed, err := (&client.Fleet{Redis: f.rc, Keys: f.keys}).Workers(ctx)
	if err != nil || slices.Contains(listed, warm) || !slices.Contains(listed, id) {
		t.Fatalf("workers listed after the wake: %v %v", listed, err)
	}
	if users, _ := f.s.rdb.WorkerUsers(ctx); slices.Contains(users, warm) {
		t.Errorf("the warm worker's Redis user is left: %v", users)
	}
	// The woken worker goes on as any: a second task, then the pool is
	// refilled with a new warm worker. Its agent is given git's way to
	// the host of the credential for the woken worker alone (the
	// wrapper's CREDENTIAL_HOSTS came with the adopt document).
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "after-wake", Prompt: "again"})
	o = f.waitOutput(t, f.keys.Output(id), "after-wake", time.Minute)
	if o.Status != protocol.StatusComplete {
		t.Fatalf("the next task: %+v", o)
	}
	if !strings.Contains(string(o.Result), "git.example.com") {
		out, _ := exec.Command("docker", "logs", "--tail", "40", c.ID).CombinedOutput()
		t.Errorf("the agent's git configuration names no git.example.com: %s (response %q)\n%s", o.Result, o.Response, out)
	}
	testkit.Eventually(t, "the pool refilled", time.Minute, func() bool {
		w := warmOnes()
		return len(w) == 1 && w[0] != warm
	})
}

// BenchmarkWakeFromPool, with the real claude against the stub model:
// a hibernated worker of a warm pool's spec woken by a task (task XADD →
// its task_started) in a warm worker of the pool, against a hibernated
// worker of a spec no pool has, woken by a new container, in the same
// rounds (12). Each worker runs a first task, is hibernated, and woken
// by a second that resumes its session; each round's workers are
// deleted after it.
func BenchmarkWakeFromPool(b *testing.B) {
	const rounds = 12
	pooled := protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "poolwake"}
	f := newFixture(b, func(c *Config) {
		c.IdleTimeout = time.Hour
		c.Pools = []PoolTemplate{{Name: "wake", Spec: pooled, MinWarm: 1, MaxTotal: 8, RecycleAfter: 1000, key: specKey(pooled)}}
	})
	f.startManager(b)
	ctx := context.Background()
	warmReady := func() bool { ids, _ := f.s.rdb.Warm(ctx, "wake"); return len(ids) == 1 }
	run := func(spec protocol.WorkerSpec, round int, fromPool bool) float64 {
		info, err := f.s.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		id := info.WorkerID
		req := fmt.Sprintf("%s-%d", spec.ProjectID, round)
		f.send(b, f.keys.Input(id), protocol.Task{RequestID: req + "-a", ProjectID: spec.ProjectID, Prompt: "remember this"})
		if o := f.waitOutput(b, f.keys.Output(id), req+"-a", 2*time.Minute); o.Status != protocol.StatusComplete {
			b.Fatalf("%s: %+v", req, o)
		}
		f.hibernateNow(b, id)
		testkit.Eventually(b, "a warm worker ready", 2*time.Minute, warmReady)
		warm, _ := f.s.rdb.Warm(ctx, "wake")
		warmContainer := f.rc.HGet(ctx, f.keys.Status(warm[0]), protocol.StatusFieldContainerID).Val()
		time.Sleep(wakeBackoff + 200*time.Millisecond) // as BenchmarkHibernation: a task comes long after the hibernation
		from := lastID(f.rc, f.keys.Lifecycle())
		t0 := time.Now()
		f.send(b, f.keys.Input(id), protocol.Task{RequestID: req + "-b", ProjectID: spec.ProjectID, Prompt: "go on"})
		at := f.waitEvent(b, from, id, protocol.EventTaskStarted, 2*time.Minute)
		took := ms(at.Sub(t0))
		o := f.waitOutput(b, f.keys.Output(id), req+"-b", 2*time.Minute)
		if o.Status != protocol.StatusComplete || o.Session == nil || o.Session.Action != protocol.SessionResume {
			b.Fatalf("%s after the wake: %+v session %+v", req, o, o.Session)
		}
		if cid := f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldContainerID).Val(); (cid == warmContainer) != fromPool {
			b.Fatalf("%s: woken in container %.12s, the warm worker's is %.12s (want the warm one: %v)", req, cid, warmContainer, fromPool)
		}
		if err := f.s.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
		return took
	}
	testkit.Eventually(b, "a warm worker ready", 2*time.Minute, warmReady)
	var fromPool, made []float64
	for i := 0; i < rounds; i++ {
		fromPool = append(fromPool, run(pooled, i, true))
		made = append(made, run(protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "nopool"}, i, false))
	}
	b.Logf("wake into a warm pool worker, ms: %v; wake making a container, ms: %v", sorted(fromPool), sorted(made))
	b.ReportMetric(median(fromPool), "pool-wake-p50-ms")
	b.ReportMetric(slices.Max(fromPool), "pool-wake-max-ms")
	b.ReportMetric(median(made), "made-wake-p50-ms")
	b.ReportMetric(slices.Max(made), "made-wake-max-ms")
}
