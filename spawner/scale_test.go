package spawner

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestTwelveCreatesWithLimitTen(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxWorkers = 10; c.CreationTimeout = 2 * time.Minute; c.KeepIdleAtLimit = true })
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	type result struct {
		info protocol.WorkerInfo
		err  error
		at   time.Time
	}
	results := make(chan result, 12)
	for i := 0; i < 12; i++ {
		go func() {
			info, err := f.s.Create(ctx, spec)
			results <- result{info, err, time.Now()}
		}()
	}
	var first []result
	for len(first) < 10 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		first = append(first, r)
	}
	testkit.Eventually(t, "two creates queued", 10*time.Second, func() bool {
		n, _ := f.rc.LLen(ctx, ctlplane.CreationQueueKey(f.keys)).Result()
		return n == 2
	})
	select {
	case r := <-results:
		t.Fatalf("an 11th create was served at the limit: %+v %v", r.info, r.err)
	case <-time.After(time.Second):
	}
	for _, r := range first[:2] {
		if err := f.s.Delete(ctx, r.info.WorkerID); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("queued create: %v", r.err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a queued create was not served when slots freed")
		}
	}
	if ws, _ := f.s.List(ctx); len(ws) != 10 {
		t.Fatalf("%d workers, want 10", len(ws))
	}
}

// At the limit a create hibernates the long-lived worker idle longest
// instead of waiting (by default), paused or running idle alike; one idle
// too briefly, one with a task waiting and one that cannot hibernate (a
// developer worker) are kept, and with EVICT_IDLE_AFTER=off the create
// queues.
func TestCreateAtTheLimitHibernatesTheWorkerIdleLongest(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.MaxWorkers, c.CreationTimeout, c.EvictIdleAfter = 3, 3*time.Second, time.Hour
	})
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	var ws []protocol.WorkerInfo
	for i := 0; i < 2; i++ {
		w, err := f.s.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	dev, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []protocol.WorkerInfo{dev, ws[0], ws[1]} { // idle longest: dev, then ws[0]
		testkit.Eventually(t, "worker "+w.WorkerID+" idle", time.Minute, func() bool {
			return f.rc.HGet(ctx, f.keys.Status(w.WorkerID), protocol.StatusFieldState).Val() == string(protocol.WorkerIdle)
		})
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.s.Pause(ctx, ws[1].WorkerID); err != nil { // paused, or running idle: the same
		t.Fatal(err)
	}
	// Idle for less than the minimum: nobody is evicted.
	if _, err := f.s.Create(ctx, spec); !IsResourceExhausted(err) {
		t.Fatalf("create at the limit with no worker idle long enough: %v", err)
	}
	f.s.cfg.EvictIdleAfter = 0
	f.s.cfg.KeepIdleAtLimit = true
	if _, err := f.s.Create(ctx, spec); !IsResourceExhausted(err) {
		t.Fatalf("create at the limit with EVICT_IDLE_AFTER=off: %v", err)
	}
	f.s.cfg.KeepIdleAtLimit = false
	// A task waiting on the one idle longest (of those that can
	// hibernate): it is kept, the other goes; the developer worker stays.
	f.send(t, f.keys.Input(ws[0].WorkerID), protocol.Task{RequestID: "waiting", Prompt: "x"})
	from := lastID(f.rc, f.keys.Lifecycle())
	start := time.Now()
	w3, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.inst.find(ctx, ws[1].WorkerID); !IsNotFound(err) {
		t.Fatalf("the idle worker without input was not evicted (%v)", err)
	}
	if st, err := f.s.Status(ctx, ws[1].WorkerID); err != nil || st.Status != protocol.ContainerHibernated {
		t.Fatalf("the evicted worker: %+v %v", st, err)
	}
	for _, kept := range []protocol.WorkerInfo{ws[0], dev} {
		if _, err := f.s.inst.find(ctx, kept.WorkerID); err != nil {
			t.Fatalf("worker %s was evicted: %v", kept.WorkerID, err)
		}
	}
	var evicted *protocol.Lifecycle
	msgs, _ := f.rc.XRange(ctx, f.keys.Lifecycle(), "("+from, "+").Result()
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if l, err := protocol.DecodeLifecycle(data); err == nil && l.WorkerID == ws[1].WorkerID && l.Event == protocol.EventStopping && l.Source == protocol.SourceSpawner {
			evicted = &l
		}
	}
	if evicted == nil || evicted.Detail["reason"] != "evicted" || evicted.Detail["for_worker"] != w3.WorkerID {
		t.Errorf("eviction event %+v", evicted)
	}
	t.Logf("create by eviction took %v", time.Since(start))
}

func TestTwoManagersDoEachCommandOnce(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, id := range []string{"manager-a", "manager-b"} {
		s := f.as(id)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = (&Manager{S: s}).Run(cctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	c := &client.Commands{Redis: f.rc, Keys: f.keys, Timeout: 2 * time.Minute}
	runConcurrently(t, 4, func(i int) error {
		cl := &client.Commands{Redis: f.rc, Keys: f.keys, Name: fmt.Sprintf("c%d", i), Timeout: 2 * time.Minute}
		_, err := cl.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &protocol.WorkerSpec{AgentType: protocol.AgentClaude}})
		return err
	})
	r, err := c.Do(ctx, protocol.Command{Action: protocol.ActionList})
	if err != nil || len(r.Workers) != 4 {
		t.Fatalf("4 creates through two managers made %d workers (%v)", len(r.Workers), err)
	}
	// Every command is acknowledged (after its reply was sent).
	testkit.Eventually(t, "every command acknowledged", 5*time.Second, func() bool {
		p, _ := f.rc.XPending(ctx, f.keys.Commands(), protocol.ManagerGroup).Result()
		return p.Count == 0
	})
}

func TestShutdownOfTwentyWorkers(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxWorkers = 20 })
	ctx := context.Background()
	runConcurrently(t, 20, func(int) error {
		_, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
		return err
	})
	start := time.Now()
	if err := f.s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if cs := containersOf(t, f); len(cs) != 0 || took > 30*time.Second {
		t.Fatalf("%d containers left, shutdown took %v", len(cs), took)
	}
	ws, _ := f.s.List(ctx)
	for _, w := range ws {
		if w.Status != protocol.ContainerHibernated {
			t.Errorf("worker %s %s after the shutdown, want hibernated", w.WorkerID, w.Status)
		}
	}
	t.Logf("20 workers hibernated in %v", took)
}

func TestManagerRestartLosesNoCommandAndDuplicatesNothing(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.s.cfg.ManagerID = "manager-x"
	if err := f.rc.XGroupCreateMkStream(ctx, f.keys.Commands(), protocol.ManagerGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	send := func(cmd protocol.Command) {
		doc, _ := cmd.Encode()
		f.rc.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Commands(), Values: protocol.Values(doc)})
	}
	spec := &protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	replies := f.keys.Replies("restart")
	// manager-x read two creates and died: one before doing anything, the
	// other after making its container but before replying.
	send(protocol.Command{ID: "c-lost", Action: protocol.ActionCreate, Spec: spec, ReplyTo: replies})
	send(protocol.Command{ID: "c-half", Action: protocol.ActionCreate, Spec: spec, ReplyTo: replies})
	f.rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: protocol.ManagerGroup, Consumer: "manager-x", Streams: []string{f.keys.Commands(), ">"}, Count: 2})
	half, err := f.s.CreateFor(ctx, "c-half", *spec)
	if err != nil {
		t.Fatal(err)
	}
	// It comes back.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = (&Manager{S: f.s}).Run(cctx) }()
	defer func() { cancel(); <-done }()
	got := map[string]protocol.Reply{}
	testkit.Eventually(t, "both replies", time.Minute, func() bool {
		msgs, _ := f.rc.XRange(ctx, replies, "-", "+").Result()
		for _, m := range msgs {
			data, _ := protocol.EntryData(m.Values)
			if r, err := protocol.DecodeReply(data); err == nil {
				got[r.CommandID] = r
			}
		}
		return len(got) == 2
	})
	if !got["c-lost"].OK || !got["c-half"].OK || got["c-half"].WorkerID != half.WorkerID {
		t.Fatalf("replies %+v", got)
	}
	if ws, _ := f.s.List(ctx); len(ws) != 2 {
		t.Fatalf("%d workers, want 2 (no duplicate)", len(ws))
	}
}

// runConcurrently runs f(0..n-1) at once and fails the test on any error.
func runConcurrently(t testing.TB, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f(i)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
