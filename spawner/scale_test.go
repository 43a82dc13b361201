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
	f := newFixture(t, func(c *Config) { c.MaxWorkers = 10; c.CreationTimeout = 2 * time.Minute })
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

// At the limit, with EVICT_PAUSED_AFTER, a create removes the worker
// paused longest instead of waiting; one paused too briefly, or with a task
// waiting, is kept (and the create times out).
func TestEvictOldestPausedWorker(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.MaxWorkers, c.CreationTimeout, c.EvictPaused, c.EvictPausedAfter = 2, 3*time.Second, true, time.Hour
	})
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	var ws []protocol.WorkerInfo
	for i := 0; i < 2; i++ {
		w, err := f.s.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.s.Pause(ctx, w.WorkerID); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
		time.Sleep(50 * time.Millisecond) // ws[0] is paused longer
	}
	// Paused for less than the minimum age: nobody is evicted.
	if _, err := f.s.Create(ctx, spec); !IsResourceExhausted(err) {
		t.Fatalf("create at the limit with no worker old enough to evict: %v", err)
	}
	f.s.cfg.EvictPausedAfter = 0
	// A task waiting on the oldest: it is kept, the other goes.
	f.send(t, f.keys.Input(ws[0].WorkerID), protocol.Task{RequestID: "waiting", Prompt: "x"})
	from := lastID(f.rc, f.keys.Lifecycle())
	start := time.Now()
	w3, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.inst.find(ctx, ws[1].WorkerID); !IsNotFound(err) {
		t.Fatalf("the paused worker without input was not evicted (%v)", err)
	}
	// Evicted, it keeps its identity: hibernated.
	if st, err := f.s.Status(ctx, ws[1].WorkerID); err != nil || st.Status != protocol.ContainerHibernated {
		t.Fatalf("the evicted worker: %+v %v", st, err)
	}
	if _, err := f.s.inst.find(ctx, ws[0].WorkerID); err != nil {
		t.Fatalf("the worker with a task waiting was evicted: %v", err)
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
