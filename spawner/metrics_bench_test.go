package spawner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
)

// BenchmarkMetricsCost: task XADD → agent start (the fake agent stamps
// its start), p99, with the metrics on and off, in alternating blocks on
// one worker of a running manager. On: the leader's stream reader counts
// every entry and /metrics is scraped every 250 ms (four times a usual
// scrape interval), its collector reading every status hash. Goal: on/off
// ≤ 1.05.
func BenchmarkMetricsCost(b *testing.B) {
	buildBenchBase(b)
	f := newFixture(b, func(c *Config) {
		useFakeAgent(c)
		c.WorkerEnv["PAUSE_AFTER_OUTPUT"] = "false"
		c.IdleTimeout = time.Hour
	})
	f.startManager(b)
	ctx := context.Background()
	w, err := f.s.Create(ctx, fakeSpec)
	if err != nil {
		b.Fatal(err)
	}
	defer f.s.Delete(context.Background(), w.WorkerID)
	tasks := &client.Tasks{Redis: f.rc, Keys: f.keys}
	// run gives one task and returns XADD → agent start in ms.
	run := func(req string) float64 {
		t0 := time.Now().UnixNano()
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		o, err := tasks.Run(tctx, w.WorkerID, protocol.Task{RequestID: req, Prompt: "fake:stamp"}, nil)
		if err != nil || o.Status != protocol.StatusComplete {
			b.Fatalf("task %s: %+v %v", req, o, err)
		}
		var st struct {
			StartNS int64 `json:"start_ns"`
		}
		if err := json.Unmarshal(o.Result, &st); err != nil {
			b.Fatalf("result %s: %v", o.Result, err)
		}
		return float64(st.StartNS-t0) / 1e6
	}
	for i := 0; i < 10; i++ { // warm-up
		run(fmt.Sprintf("warm-%d", i))
	}

	m := NewMetrics(f.rc, f.keys, 50)
	token := ops.NewToken()
	srv, addr, err := ops.Serve("127.0.0.1:0", m.Registry, nil, token, f.s.log)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	metricsOn := func() func() {
		sm := &streamMetrics{env: f.s.env, m: m}
		sm.Start(ctx)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
					req.Header.Set("Authorization", "Bearer "+token)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}
		}()
		return func() { close(stop); <-done; sm.Stop() }
	}

	var on, off []float64
	const blocks, perBlock = 8, 40
	for blk := 0; blk < blocks; blk++ {
		withMetrics := blk%2 == 1
		var stop func()
		if withMetrics {
			stop = metricsOn()
			time.Sleep(300 * time.Millisecond)
		}
		for i := 0; i < perBlock; i++ {
			d := run(fmt.Sprintf("b%d-%d", blk, i))
			if withMetrics {
				on = append(on, d)
			} else {
				off = append(off, d)
			}
		}
		if stop != nil {
			stop()
		}
	}
	b.ReportMetric(p99(on), "xadd-to-agent-start-metrics-p99-ms")
	b.ReportMetric(p99(off), "xadd-to-agent-start-no-metrics-p99-ms")
	b.Logf("XADD → agent start p99: %.2f ms with metrics, %.2f ms without (%d tasks each)", p99(on), p99(off), len(on))
}
