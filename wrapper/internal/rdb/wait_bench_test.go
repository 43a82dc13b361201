package rdb

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// BenchmarkFinishTaskWait is what WAIT costs a task's output: the finish
// script (output XADD, run hash, usage, XACK) on a real primary with a
// real replica, reached through the sentinels, with WAIT 1 (the default
// for a sentinel URL) and without, in alternating blocks of 50 so that
// both see the same machine. `make bench` reads the two p99 figures and
// the medians.
func BenchmarkFinishTaskWait(b *testing.B) {
	s := testkit.StartSentinel(b, testkit.SentinelOptions{Password: "pw-bench"})
	keys, _ := protocol.NewKeys("bench")
	db, err := Open(s.URL(), "", keys)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := db.EnsureGroup(ctx, "in", "g"); err != nil {
		b.Fatal(err)
	}
	on := protocol.WaitPolicy{Replicas: 1, Timeout: time.Second}
	var with, without []float64
	n := 0
	finish := func(p protocol.WaitPolicy) float64 {
		n++
		db.Wait = p
		req := fmt.Sprintf("r%d", n)
		out := []byte(`{"v":1,"type":"output","request_id":"` + req + `","status":"complete"}`)
		t0 := time.Now()
		published, err := db.FinishTask(ctx, Finish{RequestID: req, OutputStream: "out", Output: out, InputStream: "in", Group: "g",
			Run: map[string]any{protocol.RunFieldStatus: "completed"}, RunRetention: time.Minute})
		d := float64(time.Since(t0).Microseconds()) / 1000
		if err != nil || !published {
			b.Fatalf("finish %s: %v (published %v)", req, err, published)
		}
		return d
	}
	for range 50 { // warm-up: connections, the script cached
		finish(on)
	}
	b.ResetTimer()
	for block := 0; block < 8; block++ {
		for range 50 {
			without = append(without, finish(protocol.WaitPolicy{}))
		}
		for range 50 {
			with = append(with, finish(on))
		}
	}
	b.StopTimer()
	b.ReportMetric(pct(with, 0.99), "finish-wait-p99-ms")
	b.ReportMetric(pct(without, 0.99), "finish-no-wait-p99-ms")
	b.ReportMetric(pct(with, 0.5), "finish-wait-median-ms")
	b.ReportMetric(pct(without, 0.5), "finish-no-wait-median-ms")
}

func pct(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
