package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// BenchmarkCancel measures a cancel of a running task (cancel XADD ->
// cancelled Output readable) with the real claude against the stub model,
// whose every answer is held back a minute: with one claude process per
// task (SIGINT to its group) and with the persistent process (an interrupt
// control request). Each task is cancelled once the model got its request;
// the figure is the slowest of 10 cancels (the issue asks for a p99).
func BenchmarkCancel(b *testing.B) {
	claude, stub := claudeAndStub(b)
	stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}", DelayMS: 60_000}})
	p99 := func(persistent bool) float64 {
		r, rc := testkit.StartRedisClient(b)
		defer rc.Close()
		env := []string{"HOME=" + b.TempDir(), "PATH=/usr/local/bin:/usr/bin:/bin", "ANTHROPIC_BASE_URL=" + stub.URL,
			"ANTHROPIC_API_KEY=x", "WORKER_ID=bc-1", "REDIS_URL=" + r.URL(), "AGENT_TYPE=claude", "AGENT_BIN=" + claude,
			"WORKSPACE=" + b.TempDir(), "PAUSE_AFTER_OUTPUT=false", "AGENT_PERSISTENT=" + strconv.FormatBool(persistent)}
		cmd, _ := startWrapper(b, env)
		defer cmd.Process.Kill()
		keys := protocol.Keys{}
		last := "0-0"
		var ms []float64
		for i := 0; i < 10; i++ {
			id := "cancel-" + strconv.FormatBool(persistent) + "-" + strconv.Itoa(i)
			marker := "BENCH-CANCEL-" + id
			sendTask(b, rc, keys.Input("bc-1"), protocol.Task{RequestID: id, ProjectID: "bench", Prompt: marker})
			testkit.Eventually(b, "the model's request", time.Minute, func() bool {
				reqs := stub.Requests()
				return len(reqs) > 0 && strings.Contains(reqs[len(reqs)-1].Text(), marker)
			})
			doc, _ := protocol.NewCancel(id, "bench").Encode()
			t0 := time.Now()
			if err := rc.XAdd(context.Background(), &redis.XAddArgs{Stream: keys.Input("bc-1"), Values: protocol.Values(doc)}).Err(); err != nil {
				b.Fatal(err)
			}
			res, err := rc.XRead(context.Background(), &redis.XReadArgs{Streams: []string{keys.Output("bc-1"), last}, Block: time.Minute}).Result()
			if err != nil {
				b.Fatal(err)
			}
			ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
			last = res[0].Messages[len(res[0].Messages)-1].ID
			data, _ := protocol.EntryData(res[0].Messages[len(res[0].Messages)-1].Values)
			if o, err := protocol.DecodeOutput(data); err != nil || o.RequestID != id || o.Status != protocol.StatusCancelled {
				b.Fatalf("output %s (%v), want %s cancelled", data, err, id)
			}
		}
		return percentile(ms, 1) // the max of 10: a bound on the p99
	}
	b.ReportMetric(p99(false), "cancel-per-task-max-ms")
	b.ReportMetric(p99(true), "cancel-persistent-max-ms")
}
