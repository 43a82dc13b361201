package spawner

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

// The control plane's promises on the real engine with the fake agent.

// A pause asked of a worker with a task in flight is refused with
// WORKER_BUSY, and the task completes.
func TestPauseCommandOnABusyWorkerIsRefused(t *testing.T) {
	buildBenchBase(t)
	f := newFixture(t, func(c *Config) { useFakeAgent(c) })
	c := f.startManager(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, fakeSpec)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "busy-1", Prompt: "work fake:sleep-3000"})
	testkit.Eventually(t, "the task running", 30*time.Second, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(info.WorkerID), protocol.StatusFieldRequestID).Val() == "busy-1"
	})
	_, err = c.Do(ctx, protocol.Command{Action: protocol.ActionPause, WorkerID: info.WorkerID})
	if !IsBusy(err) {
		t.Fatalf("pause of a busy worker: %v, want WORKER_BUSY", err)
	}
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "busy-1", 30*time.Second); o.Status != protocol.StatusComplete {
		t.Fatalf("the task: %+v", o)
	}
}

// SIGTERM (the manager's context ending) answers a create waiting for a
// slot at once with SHUTTING_DOWN instead of waiting out the queue.
func TestShutdownAnswersQueuedCreates(t *testing.T) {
	buildBenchBase(t)
	f := newFixture(t, func(c *Config) {
		useFakeAgent(c)
		c.MaxWorkers = 1
		c.CreationTimeout = 5 * time.Minute
		c.KeepIdleAtLimit = true
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = (&Manager{S: f.s}).Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := &client.Commands{Redis: f.rc, Keys: f.keys, Timeout: time.Minute}
	if _, err := c.Do(context.Background(), protocol.Command{Action: protocol.ActionCreate, Spec: &fakeSpec}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Do(context.Background(), protocol.Command{Action: protocol.ActionCreate, Spec: &fakeSpec})
		errc <- err
	}()
	testkit.Eventually(t, "the second create queued", 10*time.Second, func() bool {
		return f.rc.LLen(context.Background(), ctlplane.CreationQueueKey(f.keys)).Val() == 1
	})
	start := time.Now()
	cancel()
	select {
	case err := <-errc:
		if ProtocolError(err).Code != protocol.CodeShuttingDown {
			t.Fatalf("queued create answered %v, want SHUTTING_DOWN", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued create was not answered within 10 s of the shutdown")
	}
	<-done
	// Within the grace period docker stop and Kubernetes give before
	// their SIGKILL (10 s, 30 s).
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the manager took %v to stop, past docker stop's 10 s grace period", d)
	}
	if n := f.rc.LLen(context.Background(), ctlplane.CreationQueueKey(f.keys)).Val(); n != 0 {
		t.Errorf("%d creates left in the queue", n)
	}
}

// Workers deleted in parallel are never taken for dead ones: no
// replacement is made, and the workers set ends empty.
func TestParallelDeletesMakeNoReplacement(t *testing.T) {
	buildBenchBase(t)
	f := newFixture(t, func(c *Config) { useFakeAgent(c); c.HeartbeatInterval = time.Second })
	c := f.startManager(t)
	ctx := context.Background()
	ids := make([]string, 6)
	runConcurrently(t, len(ids), func(i int) error {
		info, err := f.s.Create(ctx, fakeSpec)
		ids[i] = info.WorkerID
		return err
	})
	// Six containers started at once, beside the other packages' tests:
	// their first beats can take a while on two cores, and a key with a
	// three-second TTL can lapse between two beats of a starved worker,
	// so each worker counts once it has been seen beating.
	beating := map[string]bool{}
	testkit.Eventually(t, "every worker beating", 90*time.Second, func() bool {
		for _, id := range ids {
			if !beating[id] && f.rc.Exists(ctx, f.keys.Heartbeat(id)).Val() == 1 {
				beating[id] = true
			}
		}
		return len(beating) == len(ids)
	})
	time.Sleep(3 * time.Second) // past the judge's connected window
	runConcurrently(t, len(ids), func(i int) error {
		_, err := c.Do(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: ids[i]})
		return err
	})
	time.Sleep(3 * time.Second) // what a replacement would need to show
	if ws := f.rc.SMembers(ctx, f.keys.Workers()).Val(); len(ws) != 0 {
		t.Fatalf("workers after deleting all: %v", ws)
	}
	for _, id := range ids {
		if n := f.countEvents(t, id, protocol.EventDead); n != 0 {
			t.Errorf("worker %s declared dead %d times", id, n)
		}
		if n := f.countEvents(t, id, protocol.EventDied); n != 0 {
			t.Errorf("worker %s published died %d times on a clean delete", id, n)
		}
	}
	if ws, _ := f.s.List(ctx); len(ws) != 0 {
		t.Errorf("%d containers left: %v", len(ws), ws)
	}
}

// Two managers on one Redis: one holds the leader lease; when it stops,
// the other takes it within one lease.
func TestLeaderLeaseMovesToTheSurvivor(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.LeaseTTL = 900 * time.Millisecond })
	ctx := context.Background()
	type mgr struct {
		s      *Spawner
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(id string) *mgr {
		m := &mgr{s: f.as(id), done: make(chan struct{})}
		cctx, cancel := context.WithCancel(ctx)
		m.cancel = cancel
		go func() { defer close(m.done); _ = (&Manager{S: m.s}).Run(cctx) }()
		t.Cleanup(func() { cancel(); <-m.done })
		return m
	}
	a := start("manager-a")
	testkit.Eventually(t, "a leader", 5*time.Second, func() bool {
		return f.rc.Get(ctx, ctlplane.LeaseKey(f.keys, ctlplane.LeaderLease)).Val() != ""
	})
	b := start("manager-b")
	holder := f.rc.Get(ctx, ctlplane.LeaseKey(f.keys, ctlplane.LeaderLease)).Val()
	if holder != a.s.instance {
		t.Fatalf("leader %q, want the first manager %q", holder, a.s.instance)
	}
	a.cancel()
	<-a.done
	stopped := time.Now()
	testkit.Eventually(t, "the survivor leads", 5*time.Second, func() bool {
		return f.rc.Get(ctx, ctlplane.LeaseKey(f.keys, ctlplane.LeaderLease)).Val() == b.s.instance
	})
	// A leader that stops releases its lease: the survivor takes it at its
	// next try, within a third of a lease, and never later than one lease.
	if d := time.Since(stopped); d > f.s.cfg.LeaseTTL {
		t.Errorf("leadership moved %v after the leader stopped, want within one lease (%v)", d, f.s.cfg.LeaseTTL)
	}
}

// A command whose reply_to is not a reply stream is not executed and
// writes nothing where it points.
func TestReplyToMustBeAReplyStream(t *testing.T) {
	f := newFixture(t, nil)
	f.startManager(t)
	ctx := context.Background()
	victim := f.keys.Input("some-worker")
	cmd := protocol.Command{ID: "evil-1", Action: protocol.ActionList, ReplyTo: victim, Timestamp: time.Now()}
	doc, _ := cmd.Encode()
	entry := f.rc.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Commands(), Values: protocol.Values(doc)}).Val()
	testkit.Eventually(t, "the command read and acknowledged", 10*time.Second, func() bool {
		gs, err := f.rc.XInfoGroups(ctx, f.keys.Commands()).Result()
		return err == nil && len(gs) == 1 && gs[0].LastDeliveredID == entry && gs[0].Pending == 0
	})
	if n := f.rc.Exists(ctx, victim).Val(); n != 0 {
		t.Fatalf("a reply was written into %s", victim)
	}
}
