package client

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/client/internal/redistest"
	"github.com/agentvisor/agentvisor/protocol"
)

// BenchmarkFleetWorkers: listing every worker (Fleet.Workers, read by
// each /metrics scrape, dashboard page and workerctl list) with 100
// workers awake and 100 hibernated on 3 hosts, against the bare SMEMBERS
// of the workers set (the listing before hibernated workers were listed),
// alternating on one Redis in the same run.
func BenchmarkFleetWorkers(b *testing.B) {
	rc := redistest.NewClient(b)
	keys := protocol.Keys{Prefix: "fleetbench"}
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		rc.SAdd(ctx, keys.Workers(), fmt.Sprintf("awake-%03d", i))
		h := fmt.Sprintf("host-%d", i%3)
		rc.SAdd(ctx, keys.HibernatedHosts(), h)
		rc.SAdd(ctx, keys.Hibernated(h), fmt.Sprintf("asleep-%03d", i))
	}
	f := &Fleet{Redis: rc, Keys: keys}
	const rounds, block = 2000, 50
	var list, bare []float64
	for n := 0; n < rounds; n += block {
		for i := 0; i < block; i++ {
			t0 := time.Now()
			ids, err := f.Workers(ctx)
			list = append(list, float64(time.Since(t0).Microseconds()))
			if err != nil || len(ids) != 200 {
				b.Fatalf("workers: %d, %v", len(ids), err)
			}
		}
		for i := 0; i < block; i++ {
			t0 := time.Now()
			if err := rc.SMembers(ctx, keys.Workers()).Err(); err != nil {
				b.Fatal(err)
			}
			bare = append(bare, float64(time.Since(t0).Microseconds()))
		}
	}
	slices.Sort(list)
	slices.Sort(bare)
	p := func(xs []float64, q float64) float64 { return xs[int(q*float64(len(xs)-1))] }
	b.Logf("Fleet.Workers µs p50 %.0f p99 %.0f; SMEMBERS of the workers set µs p50 %.0f p99 %.0f", p(list, 0.5), p(list, 0.99), p(bare, 0.5), p(bare, 0.99))
	b.ReportMetric(p(list, 0.5), "fleet-workers-p50-us")
	b.ReportMetric(p(list, 0.99), "fleet-workers-p99-us")
	b.ReportMetric(p(bare, 0.5), "workers-smembers-p50-us")
	b.ReportMetric(p(bare, 0.99), "workers-smembers-p99-us")
}
