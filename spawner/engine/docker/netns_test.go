package docker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentvisor/agentvisor/spawner/engine/docker/dockertest"
	"github.com/agentvisor/agentvisor/testkit"
)

var _ Client = (*dockertest.Fake)(nil)

func newTestNetnsPool(d Client, settle time.Duration) *netnsPool {
	return newNetnsPool(netnsParams{docker: d, image: func() string { return "base" }, prefix: "unit", managerID: "m1",
		host: func() string { return "h1" }, spare: 2, settle: settle, markTTL: time.Minute,
		mark:   func(context.Context, []string, time.Duration) error { return nil },
		marked: func(context.Context, []string) (map[string]bool, error) { return map[string]bool{}, nil },
		log:    slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// A worker's start has the engine to itself: the holder of the namespace
// it joined goes, and a spare is made, only settle after the start. A pool
// that runs dry refills at once; a stop removes every holder at once.
func TestNetnsPoolLeavesTheEngineToAStart(t *testing.T) {
	d := dockertest.New()
	const settle = 300 * time.Millisecond
	p := newTestNetnsPool(d, settle)
	p.warm()
	testkit.Eventually(t, "the spare namespaces", 5*time.Second, p.settled)
	made := d.Count("create")

	holder := p.take()
	if holder == "" {
		t.Fatal("take with spares ready: none")
	}
	p.started(holder)
	time.Sleep(settle / 3)
	if d.Count("create") != made || !d.Has(strings.TrimPrefix(holder, "cid-")) || p.settled() {
		t.Fatalf("within settle of the start: %d holders made (want %d), holder there: %v", d.Count("create"), made, d.Has(strings.TrimPrefix(holder, "cid-")))
	}
	testkit.Eventually(t, "the holder gone and a spare made after settle", 5*time.Second, p.settled)
	if d.Has(strings.TrimPrefix(holder, "cid-")) || d.Count("create") != made+1 {
		t.Fatalf("after settle: holder there %v, %d made (want %d)", d.Has(strings.TrimPrefix(holder, "cid-")), d.Count("create"), made+1)
	}

	// Run dry: the refill starts with the take that emptied the pool.
	a, b := p.take(), p.take()
	testkit.Eventually(t, "a dry pool refilled before any start", 5*time.Second, func() bool { return p.ready() == 2 })
	p.started(a)
	p.started(b)
	p.close(context.Background())
	for _, h := range []string{a, b} {
		if name := strings.TrimPrefix(h, "cid-"); d.Has(name) {
			t.Fatalf("holder %s of a started worker left after the stop", name)
		}
	}
	if cs, _ := d.ContainerList(context.Background(), container.ListOptions{All: true}); len(cs) != 0 {
		t.Fatalf("%d holders left after the stop", len(cs))
	}
	removed := d.Count("remove")
	time.Sleep(settle + 100*time.Millisecond) // the stopped timers do nothing
	if n := d.Count("create"); n != made+3 {
		t.Fatalf("%d holders made, want %d", n, made+3)
	}
	if n := d.Count("remove"); n != removed {
		t.Fatalf("%d removals after the stop, want none", n-removed)
	}
}

// gatedDocker holds the removal of one container until gate closes.
type gatedDocker struct {
	*dockertest.Fake
	mu      sync.Mutex
	hold    string
	entered chan struct{}
	gate    chan struct{}
}

func (d *gatedDocker) ContainerRemove(ctx context.Context, id string, o container.RemoveOptions) error {
	d.mu.Lock()
	held := id == d.hold
	d.mu.Unlock()
	if held {
		close(d.entered)
		<-d.gate
	}
	return d.Fake.ContainerRemove(ctx, id, o)
}

// A stop that comes while a started worker's holder is being removed
// returns once it is gone: a manager that exits at once leaves none.
func TestNetnsPoolStopWaitsForAHolderGoing(t *testing.T) {
	d := &gatedDocker{Fake: dockertest.New(), entered: make(chan struct{}), gate: make(chan struct{})}
	p := newTestNetnsPool(d, time.Millisecond)
	p.warm()
	testkit.Eventually(t, "the spare namespaces", 5*time.Second, p.settled)
	holder := p.take()
	d.mu.Lock()
	d.hold = holder
	d.mu.Unlock()
	p.started(holder)
	select {
	case <-d.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the holder's removal never started")
	}
	go func() { time.Sleep(200 * time.Millisecond); close(d.gate) }()
	p.close(context.Background())
	if name := strings.TrimPrefix(holder, "cid-"); d.Has(name) {
		t.Fatalf("the stop returned with holder %s of a started worker still there", name)
	}
}

// A spare taken by a create that neither started nor released it (its
// container left to a redelivery) is made again at the next sweep.
func TestNetnsPoolSweepMakesAMissingSpare(t *testing.T) {
	d := dockertest.New()
	p := newTestNetnsPool(d, time.Hour)
	defer p.close(context.Background())
	p.warm()
	testkit.Eventually(t, "the spare namespaces", 5*time.Second, p.settled)
	p.take()
	time.Sleep(50 * time.Millisecond)
	if p.ready() != 1 {
		t.Fatalf("%d spares after a take with one left: no refill yet", p.ready())
	}
	p.sweep(context.Background())
	testkit.Eventually(t, "the missing spare made by the sweep", 5*time.Second, func() bool { return p.ready() == 2 })
}

// startGated holds the start of every container until gate closes.
type startGated struct {
	*dockertest.Fake
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (d *startGated) ContainerStart(ctx context.Context, id string, o container.StartOptions) error {
	d.once.Do(func() { close(d.entered) })
	<-d.gate
	return d.Fake.ContainerStart(ctx, id, o)
}

// A holder whose start outlasts its mark's TTL (a loaded engine) is the
// refill's, not an earlier run's: a sweep meanwhile leaves it, and it
// joins the spares.
func TestNetnsPoolSweepLeavesAHolderBeingStarted(t *testing.T) {
	d := &startGated{Fake: dockertest.New(), entered: make(chan struct{}), gate: make(chan struct{})}
	p := newNetnsPool(netnsParams{docker: d, image: func() string { return "base" }, prefix: "unit", managerID: "m1",
		host: func() string { return "h1" }, spare: 1, settle: time.Hour, markTTL: 30 * time.Millisecond,
		mark: func(context.Context, []string, time.Duration) error { return nil },
		marked: func(_ context.Context, ids []string) (map[string]bool, error) {
			return map[string]bool{ids[0]: true}, nil
		},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	release := sync.OnceFunc(func() { close(d.gate) })
	defer p.close(context.Background())
	defer release() // before the close, which waits for the refill
	p.warm()
	select {
	case <-d.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the refill never started a holder")
	}
	time.Sleep(60 * time.Millisecond) // past the mark's TTL
	if n := p.sweep(context.Background()); n != 0 {
		t.Fatalf("the sweep removed %d holders while the refill started one", n)
	}
	release()
	testkit.Eventually(t, "the holder among the spares", 5*time.Second, func() bool { return p.ready() == 1 })
	if d.Count("remove") != 0 {
		t.Fatalf("calls %v: a holder was removed", d.Calls())
	}
}
