package spawner

import (
	"context"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// evictRounds is how many creates BenchmarkCreateAtTheLimit times each
// way.
const evictRounds = 10

// BenchmarkCreateAtTheLimit times a create (the call → the worker's
// container started) that finds every slot taken and must first
// hibernate the worker idle longest, against a create with a slot free,
// alternately on the same host (MAX_CONCURRENT_WORKERS=2, the fake agent).
func BenchmarkCreateAtTheLimit(b *testing.B) {
	buildBenchBase(b)
	f := newFixture(b, func(c *Config) { useFakeAgent(c); c.MaxWorkers, c.EvictIdleAfter = 2, 0 })
	ctx := context.Background()
	create := func() (protocol.WorkerInfo, float64) {
		t0 := time.Now()
		w, err := f.s.Create(ctx, fakeSpec)
		if err != nil {
			b.Fatal(err)
		}
		ms := float64(time.Since(t0).Microseconds()) / 1000
		idle(b, f, w.WorkerID)
		return w, ms
	}
	del := func(id string) {
		if err := f.s.Delete(ctx, id); err != nil {
			b.Fatalf("delete %s: %v", id, err)
		}
	}
	older, _ := create()
	newer, _ := create()
	var free, evicting []float64
	for range evictRounds {
		del(older.WorkerID) // a slot free
		a, ms := create()
		free = append(free, ms)
		c, ms := create() // newer, idle longest, gives its slot
		evicting = append(evicting, ms)
		if st, err := f.s.Status(ctx, newer.WorkerID); err != nil || st.Status != protocol.ContainerHibernated {
			b.Fatalf("the worker idle longest: %+v %v, want hibernated", st, err)
		}
		del(newer.WorkerID)
		older, newer = a, c
	}
	b.ReportMetric(median(evicting), "evict-create-p50-ms")
	b.ReportMetric(median(free), "free-slot-create-p50-ms")
}
