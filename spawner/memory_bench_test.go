package spawner

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// usedMemory is Redis's used_memory in bytes.
func usedMemory(b *testing.B, rc *redis.Client) float64 {
	b.Helper()
	info, err := rc.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}

// Redis stays flat over a long run: 10 000 tasks through 4 workers, with
// the retention bounds set short (streams capped, runs expiring, inputs
// trimmed by the leader), leave Redis's memory where it was after a
// warm-up of the same workers. TASKS overrides the count.
func BenchmarkRedisMemoryOverTenThousandTasks(b *testing.B) {
	buildBenchBase(b)
	tasks := 10_000
	if v, err := strconv.Atoi(getenvDefault("TASKS", "")); err == nil && v > 0 {
		tasks = v
	}
	const workers = 4
	retention := 3 * time.Second
	f := newFixture(b, func(c *Config) {
		useFakeAgent(c)
		c.WorkerEnv["SESSION_POLICY"] = "new"
		c.RunRetention, c.StreamMaxLen, c.IdleTimeout = retention, 200, time.Hour
	})
	f.startManager(b)
	ctx := context.Background()
	ids := make([]string, workers)
	for i := range ids {
		w, err := f.s.Create(ctx, fakeSpec)
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = w.WorkerID
	}
	run := func(n int, tag string) {
		var done atomic.Int64
		stop := make(chan struct{})
		readers := make(chan error, workers)
		for _, id := range ids {
			go func() {
				last := "0-0"
				for {
					select {
					case <-stop:
						readers <- nil
						return
					default:
					}
					res, err := f.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{f.keys.Output(id), last}, Block: 200 * time.Millisecond, Count: 500}).Result()
					if err != nil && err != redis.Nil {
						readers <- err
						return
					}
					for _, st := range res {
						for _, m := range st.Messages {
							last = m.ID
							data, _ := protocol.EntryData(m.Values)
							if o, err := protocol.DecodeOutput(data); err == nil && strings.HasPrefix(o.RequestID, tag) {
								done.Add(1)
							}
						}
					}
				}
			}()
		}
		for i := 0; i < n; i++ {
			id := ids[i%workers]
			f.send(b, f.keys.Input(id), protocol.Task{RequestID: fmt.Sprintf("%s-%d", tag, i), Prompt: "small"})
		}
		deadline := time.Now().Add(time.Duration(n) * 200 * time.Millisecond)
		for done.Load() < int64(n) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		close(stop)
		for range ids {
			if err := <-readers; err != nil {
				b.Fatal(err)
			}
		}
		if got := done.Load(); got != int64(n) {
			b.Fatalf("%s: %d outputs of %d tasks", tag, got, n)
		}
	}
	settle := func() float64 {
		time.Sleep(retention + time.Second)    // runs expire
		parts{f.s}.retention().trimInputs(ctx) // what the leader does every 30 s
		return usedMemory(b, f.rc)
	}
	// The warm-up fills every capped stream to its cap (200 entries): the
	// steady state whose memory the long run must not grow.
	run(1000, "warm")
	before := settle()
	start := time.Now()
	run(tasks, "long")
	took := time.Since(start)
	after := settle()
	kinds := map[string]int{}
	iter := f.rc.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		parts := strings.Split(k, ":")
		kinds[parts[min(1, len(parts)-1)]+"/"+fmt.Sprint(len(parts))]++
	}
	b.Logf("keys by kind: %v", kinds)
	b.ReportMetric(float64(tasks), "memory-run-tasks")
	b.ReportMetric(before/1e6, "redis-memory-before-MB")
	b.ReportMetric(after/1e6, "redis-memory-after-MB")
	b.ReportMetric(took.Seconds(), "memory-run-s")
	b.Logf("%d tasks in %v; Redis used_memory %.2f MB before, %.2f MB after", tasks, took, before/1e6, after/1e6)
}

func getenvDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
