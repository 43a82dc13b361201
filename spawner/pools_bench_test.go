package spawner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// Allocation from a warm pool against a cold create of the same worker,
// in the same run, and the first task's latency (create + first Output,
// the real claude against the stub model) each way.
func BenchmarkPoolAllocation(b *testing.B) {
	const rounds = 12
	warmSpec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	coldSpec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, UserID: "cold"} // matches no template
	f := newFixture(b, func(c *Config) {
		c.MaxWorkers = 8
		c.IdleTimeout = time.Hour
		// A new session per task, cold or warm alike: the first task of a
		// worker never resumes another worker's session of the project.
		c.WorkerEnv = map[string]string{"SESSION_POLICY": "new"}
		c.Pools = []PoolTemplate{{Name: "bench", Spec: warmSpec, MinWarm: 3, MaxTotal: 6, key: specKey(warmSpec)}}
	})
	f.startManager(b)
	ctx := context.Background()
	ready := func() {
		testkit.Eventually(b, "three warm workers", 2*time.Minute, func() bool {
			w, _ := f.s.rdb.Warm(ctx, "bench")
			return len(w) == 3
		})
	}
	var alloc, cold, firstWarm, firstCold []float64
	for i := 0; i < rounds; i++ {
		ready()
		for _, warm := range []bool{true, false} {
			spec := coldSpec
			if warm {
				spec = warmSpec
			}
			start := time.Now()
			info, err := f.s.CreateFor(ctx, fmt.Sprintf("bench-%d-%v", i, warm), spec)
			if err != nil {
				b.Fatal(err)
			}
			created := time.Since(start)
			req := fmt.Sprintf("first-%d-%v", i, warm)
			f.send(b, f.keys.Input(info.WorkerID), protocol.Task{RequestID: req, Prompt: "hello"})
			f.waitOutput(b, f.keys.Output(info.WorkerID), req, time.Minute)
			first := time.Since(start)
			if warm {
				alloc, firstWarm = append(alloc, ms(created)), append(firstWarm, ms(first))
			} else {
				cold, firstCold = append(cold, ms(created)), append(firstCold, ms(first))
			}
			if err := f.s.Delete(ctx, info.WorkerID); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(p99(alloc), "pool-allocation-p99-ms")
	b.ReportMetric(p99(cold), "cold-create-p99-ms")
	b.ReportMetric(median(firstWarm), "first-task-warm-median-ms")
	b.ReportMetric(median(firstCold), "first-task-cold-median-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
