package spawner

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentvisor/agentvisor/testkit"
)

func newTestNetnsPool(d *fakeDocker, settle time.Duration) *netnsPool {
	return newNetnsPool(netnsParams{docker: d, image: func() string { return "base" }, prefix: "unit", managerID: "m1",
		host: func() string { return "h1" }, spare: 2, settle: settle, markTTL: time.Minute,
		mark:   func(context.Context, []string, time.Duration) error { return nil },
		marked: func(context.Context, []string) (map[string]bool, error) { return map[string]bool{}, nil },
		log:    slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func (d *fakeDocker) count(op string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		if strings.HasPrefix(c, op+" ") {
			n++
		}
	}
	return n
}

// A worker's start has the engine to itself: the holder of the namespace
// it joined goes, and a spare is made, only settle after the start. A pool
// that runs dry refills at once; a stop removes every holder at once.
func TestNetnsPoolLeavesTheEngineToAStart(t *testing.T) {
	d := newFakeDocker()
	const settle = 300 * time.Millisecond
	p := newTestNetnsPool(d, settle)
	p.warm()
	testkit.Eventually(t, "the spare namespaces", 5*time.Second, p.settled)
	made := d.count("create")

	mode := p.take()
	holder := holderOf(mode)
	if holder == "" {
		t.Fatalf("take with spares ready: %q", mode)
	}
	p.started(mode)
	time.Sleep(settle / 3)
	if d.count("create") != made || !d.has(strings.TrimPrefix(holder, "cid-")) || p.settled() {
		t.Fatalf("within settle of the start: %d holders made (want %d), holder there: %v", d.count("create"), made, d.has(strings.TrimPrefix(holder, "cid-")))
	}
	testkit.Eventually(t, "the holder gone and a spare made after settle", 5*time.Second, p.settled)
	if d.has(strings.TrimPrefix(holder, "cid-")) || d.count("create") != made+1 {
		t.Fatalf("after settle: holder there %v, %d made (want %d)", d.has(strings.TrimPrefix(holder, "cid-")), d.count("create"), made+1)
	}

	// Run dry: the refill starts with the take that emptied the pool.
	a, b := p.take(), p.take()
	testkit.Eventually(t, "a dry pool refilled before any start", 5*time.Second, func() bool { return p.ready() == 2 })
	p.started(a)
	p.started(b)
	p.close(context.Background())
	for _, m := range []container.NetworkMode{a, b} {
		if name := strings.TrimPrefix(holderOf(m), "cid-"); d.has(name) {
			t.Fatalf("holder %s of a started worker left after the stop", name)
		}
	}
	if cs, _ := d.ContainerList(context.Background(), container.ListOptions{All: true}); len(cs) != 0 {
		t.Fatalf("%d holders left after the stop", len(cs))
	}
	time.Sleep(settle + 100*time.Millisecond) // the stopped timers do nothing
	if n := d.count("create"); n != made+3 {
		t.Fatalf("%d holders made, want %d", n, made+3)
	}
}
