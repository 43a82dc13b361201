package spawner

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestParsePools(t *testing.T) {
	ps, err := ParsePools([]byte(`[{"name":"claude-git","spec":{"agent_type":"claude","capabilities":["GIT"]},"min_warm":2,"max_total":4,"recycle_after":10},
		{"name":"devs","spec":{"agent_type":"droid","kind":"developer"},"size":3}]`))
	if err != nil || len(ps) != 2 || ps[1].MaxTotal != PoolDefaults.MaxTotal || ps[1].MinWarm != 0 {
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
		c.MaxWorkers, c.KeepIdleAtLimit = 6, true
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

// A template that leaves its numbers out gets the design's pool policy;
// the numbers it gives are kept; published and read back it is the same.
func TestPoolDefaults(t *testing.T) {
	ps, err := ParsePools([]byte(`[{"name":"plain","spec":{"agent_type":"claude"}},
		{"name":"given","spec":{"agent_type":"droid"},"min_warm":1,"max_total":2,"recycle_after":0,"idle_timeout":"90s"},
		{"name":"devs","spec":{"agent_type":"claude","kind":"developer"},"size":25}]`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                             string
		minWarm, maxTotal, recycle, size int
		idle                             time.Duration
	}{
		{"plain", 3, 20, 10, 0, 5 * time.Minute},
		{"given", 1, 2, 0, 0, 90 * time.Second},
		{"devs", 0, 25, 10, 25, 5 * time.Minute},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ps[i]
			if p.Name != tt.name || p.MinWarm != tt.minWarm || p.MaxTotal != tt.maxTotal || p.RecycleAfter != tt.recycle ||
				p.Size != tt.size || p.IdleTimeout != tt.idle {
				t.Fatalf("%+v", p)
			}
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var back PoolTemplate
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			back.key = p.key
			if !reflect.DeepEqual(back, p) {
				t.Fatalf("round trip of %s: %+v", b, back)
			}
		})
	}
	for _, bad := range []string{
		`[{"name":"a","spec":{"agent_type":"claude"},"idle_timeout":"soon"}]`,
		`[{"name":"a","spec":{"agent_type":"claude"},"idle_timeout":"-1m"}]`,
		`[{"name":"a","spec":{"agent_type":"claude"},"max_total":2}]`, // min_warm 3 by default
	} {
		if _, err := ParsePools([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// poolWorkersFake counts what a pool's tending asks of the spawner.
type poolWorkersFake struct {
	mu      sync.Mutex
	created []string
	paused  []string
}

func (f *poolWorkersFake) retire(context.Context, string, retirement) (bool, error) { return true, nil }

func (f *poolWorkersFake) Pause(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused = append(f.paused, id)
	return nil
}

func (f *poolWorkersFake) create(_ context.Context, _ string, _ protocol.WorkerSpec, o createOpts) (protocol.WorkerInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, o.pool+"/"+o.poolState)
	return protocol.WorkerInfo{WorkerID: fmt.Sprintf("new-%d", len(f.created))}, nil
}

// statusReads records the worker status hashes a Redis client reads.
type statusReads struct {
	mu   sync.Mutex
	keys []string
}

func (h *statusReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *statusReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hgetall" {
			h.mu.Lock()
			h.keys = append(h.keys, fmt.Sprint(cmd.Args()[1]))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (h *statusReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A pool's tending reads the status of its own members only, not of the
// fleet's other workers, and a member no longer a worker is dropped from
// its set; what it counts makes it refill to min_warm.
func TestPoolReadsOnlyItsMembers(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	now := time.Now()
	for i := range 30 {
		u.worker(t, fmt.Sprintf("other-%d", i), "running", now)
	}
	for _, id := range []string{"warm-1", "warm-2"} {
		u.worker(t, id, "paused", now)
		u.rc.HSet(ctx, u.keys.Status(id), protocol.StatusFieldPool, "p", protocol.StatusFieldPoolState, protocol.PoolWarm)
		if err := u.s.rdb.AddPoolMember(ctx, "p", id); err != nil {
			t.Fatal(err)
		}
		_ = u.s.rdb.AddWarm(ctx, "p", id)
	}
	// A member retired without its set being told.
	_ = u.s.rdb.AddPoolMember(ctx, "p", "gone")
	// A member whose create is under way: not counted, kept.
	_ = u.s.rdb.AddPoolMember(ctx, "p", "making")
	u.rc.ZAdd(ctx, ctlplane.CreatingKey(u.keys), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "making"})
	reads := &statusReads{}
	u.rc.AddHook(reads)
	w := &poolWorkersFake{}
	tmpl := PoolTemplate{Name: "p", Spec: fakeSpec, MinWarm: 3, MaxTotal: 20}
	pools := newPools(u.s.env, []PoolTemplate{tmpl}, w)
	pools.tendPool(ctx, &pools.templates[0])

	if !slices.Equal(w.created, []string{"p/" + protocol.PoolWarm}) {
		t.Fatalf("created %v: want one warm worker", w.created)
	}
	for _, k := range reads.keys {
		if k != u.keys.Status("warm-1") && k != u.keys.Status("warm-2") {
			t.Errorf("the pool read %s", k)
		}
	}
	if len(reads.keys) != 2 {
		t.Errorf("status reads %v", reads.keys)
	}
	members, _ := u.rc.SMembers(ctx, ctlplane.PoolMembersKey(u.keys, "p")).Result()
	if slices.Contains(members, "gone") || !slices.Contains(members, "making") || len(members) != 3 {
		t.Errorf("members after tending: %v", members)
	}
}

// retiresFake records the retirements a Timeouts asks for.
type retiresFake struct {
	mu  sync.Mutex
	ids []string
}

func (f *retiresFake) retire(_ context.Context, id string, _ retirement) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, id)
	return true, nil
}

// A warm worker waits paused past the pause timeout and stays; a paused
// worker of no pool is retired; an allocated worker is paused after its
// pool's idle_timeout, others after IDLE_TIMEOUT.
func TestTimeoutsSpareWarmWorkers(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	var paused []string
	rt := &retiresFake{}
	to := newTimeouts(timeoutsParams{env: u.s.env, workers: rt,
		pause:    func(_ context.Context, id string) error { paused = append(paused, id); return nil },
		interval: time.Second, idle: 10 * time.Minute, paused: 30 * time.Minute,
		poolIdle: poolIdle([]PoolTemplate{{Name: "p", IdleTimeout: 5 * time.Minute}})})
	at := func(ago time.Duration) string { return protocol.FormatTime(u.now().Add(-ago)) }
	tests := []struct {
		name, id string
		h        map[string]string
		pause    bool
		retire   bool
	}{
		{"warm, paused an hour", "warm", map[string]string{protocol.StatusFieldContainer: "paused", protocol.StatusFieldState: "paused",
			protocol.StatusFieldPool: "p", protocol.StatusFieldPoolState: protocol.PoolWarm, protocol.StatusFieldUpdatedAt: at(time.Hour)}, false, false},
		{"no pool, paused an hour", "plain", map[string]string{protocol.StatusFieldContainer: "paused", protocol.StatusFieldState: "paused",
			protocol.StatusFieldUpdatedAt: at(time.Hour)}, false, true},
		{"allocated, idle 6m", "alloc", map[string]string{protocol.StatusFieldContainer: "running", protocol.StatusFieldState: "idle",
			protocol.StatusFieldPool: "p", protocol.StatusFieldPoolState: protocol.PoolAllocated, protocol.StatusFieldUpdatedAt: at(6 * time.Minute)}, true, false},
		{"no pool, idle 6m", "idle6", map[string]string{protocol.StatusFieldContainer: "running", protocol.StatusFieldState: "idle",
			protocol.StatusFieldUpdatedAt: at(6 * time.Minute)}, false, false},
		{"no pool, idle 11m", "idle11", map[string]string{protocol.StatusFieldContainer: "running", protocol.StatusFieldState: "idle",
			protocol.StatusFieldUpdatedAt: at(11 * time.Minute)}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paused, rt.ids = nil, nil
			to.check(ctx, tt.id, tt.h)
			if got := slices.Contains(paused, tt.id); got != tt.pause {
				t.Errorf("paused: %v, want %v", got, tt.pause)
			}
			if got := slices.Contains(rt.ids, tt.id); got != tt.retire {
				t.Errorf("retired: %v, want %v", got, tt.retire)
			}
		})
	}
}

// A create served from the warm set is seen in the allocation wait
// histogram, and the pool's utilisation and workers are scraped from
// Redis.
func TestPoolMetrics(t *testing.T) {
	tmpl := PoolTemplate{Name: "p", Spec: fakeSpec, MinWarm: 2, MaxTotal: 20, key: specKey(fakeSpec)}
	u := newUnit(t, func(c *Config) { c.Pools = []PoolTemplate{tmpl} })
	m := NewMetrics(u.rc, u.keys, 10)
	u.s.UseMetrics(m, "")
	ctx := context.Background()
	for _, id := range []string{"warm-1", "warm-2"} {
		u.worker(t, id, "paused", u.now())
		u.rc.HSet(ctx, u.keys.Status(id), protocol.StatusFieldPool, "p", protocol.StatusFieldPoolState, protocol.PoolWarm)
		_ = u.s.rdb.AddPoolMember(ctx, "p", id)
		_ = u.s.rdb.AddWarm(ctx, "p", id)
	}
	b, _ := json.Marshal(tmpl)
	_ = u.s.rdb.PublishPools(ctx, map[string]string{"p": string(b)})

	info, err := u.s.createFor(ctx, "", fakeSpec, nil)
	if err != nil || (info.WorkerID != "warm-1" && info.WorkerID != "warm-2") {
		t.Fatalf("create: %+v %v", info, err)
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			labels := ""
			for _, l := range mt.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			switch {
			case mt.GetHistogram() != nil:
				got[f.GetName()+"{"+labels+"}"] = float64(mt.GetHistogram().GetSampleCount())
			case mt.GetGauge() != nil:
				got[f.GetName()+"{"+labels+"}"] = mt.GetGauge().GetValue()
			}
		}
	}
	for k, want := range map[string]float64{
		"agentvisor_pool_allocation_wait_seconds{pool=p,source=warm,}": 1,
		"agentvisor_pool_utilization{pool=p,}":                         0.5,
		"agentvisor_pool_workers{pool=p,pool_state=warm,}":             1,
		"agentvisor_pool_workers{pool=p,pool_state=allocated,}":        1,
		"agentvisor_state_scrape_errors{}":                             0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}

// A leader that starts tending records in the member sets the pool
// workers made before them, and only those of its pools.
func TestPoolBackfill(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	for id, pool := range map[string]string{"old-1": "p", "old-2": "p", "other": "q", "plain": ""} {
		u.worker(t, id, "paused", u.now())
		if pool != "" {
			u.rc.HSet(ctx, u.keys.Status(id), protocol.StatusFieldPool, pool, protocol.StatusFieldPoolState, protocol.PoolWarm)
		}
	}
	pools := newPools(u.s.env, []PoolTemplate{{Name: "p", Spec: fakeSpec}}, &poolWorkersFake{})
	pools.backfill(ctx)
	members, err := u.s.rdb.PoolMembers(ctx, "p")
	slices.Sort(members)
	if err != nil || !slices.Equal(members, []string{"old-1", "old-2"}) {
		t.Fatalf("members %v %v", members, err)
	}
	if n := u.rc.Exists(ctx, ctlplane.PoolMembersKey(u.keys, "q")).Val(); n != 0 {
		t.Error("a pool not configured here got a member set")
	}
}

// On an engine that cannot freeze, an idle worker that cannot hibernate
// is not paused: it is retired once idle past IDLE_TIMEOUT and
// PAUSE_TIMEOUT together, when a paused one would have been.
func TestTimeoutsWithoutAFreeze(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	var paused []string
	rt := &retiresFake{}
	to := newTimeouts(timeoutsParams{env: u.s.env, workers: rt, noFreeze: true,
		pause:    func(_ context.Context, id string) error { paused = append(paused, id); return nil },
		interval: time.Second, idle: 10 * time.Minute, paused: 30 * time.Minute})
	idle := func(ago time.Duration) map[string]string {
		return map[string]string{protocol.StatusFieldContainer: "running", protocol.StatusFieldState: "idle",
			protocol.StatusFieldKind: string(protocol.KindDeveloper), protocol.StatusFieldUpdatedAt: protocol.FormatTime(u.now().Add(-ago))}
	}
	to.check(ctx, "w11", idle(11*time.Minute))
	to.check(ctx, "w41", idle(41*time.Minute))
	if len(paused) != 0 {
		t.Errorf("paused %v: nothing is paused on an engine that cannot freeze", paused)
	}
	if !slices.Equal(rt.ids, []string{"w41"}) {
		t.Errorf("retired %v, want [w41] (idle past 10m + 30m)", rt.ids)
	}
}
