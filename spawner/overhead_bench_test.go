package spawner

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// BenchmarkRealClaudeInWorker runs the same real `claude -p` task directly
// on this machine (no CPU limit) and through a worker container at the
// default WORKER_CPU_LIMIT (0.5 CPU), alternately, against the same stub
// model, and reports both medians, and the wrapper's own share of each
// worker task: its wall time (task XADD to Output) less the agent's run
// as the wrapper timed it (the Output's duration_ms). The container's
// CPU limit is what makes the difference: Claude Code's start is
// CPU-bound. wrapper/cmd/worker-wrapper's BenchmarkTaskOverhead is the
// same comparison without a limit (the wrapper as a host process).
func BenchmarkRealClaudeInWorker(b *testing.B) {
	claude, err := exec.LookPath("claude")
	if err != nil {
		b.Fatalf("the real claude CLI is not installed (run `make setup`): %v", err)
	}
	f := newFixture(b, func(c *Config) {
		c.WorkerEnv = map[string]string{"PAUSE_AFTER_OUTPUT": "false"}
	})
	if f.s.cfg.CPULimit != 0.5 {
		b.Fatalf("WORKER_CPU_LIMIT is %g: this benchmark measures the default, 0.5", f.s.cfg.CPULimit)
	}
	ctx := context.Background()
	// No manager runs: nothing pauses the worker between tasks.
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		b.Fatal(err)
	}
	defer f.s.Delete(ctx, info.WorkerID)
	home, ws := b.TempDir(), b.TempDir()
	agentEnv := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "ANTHROPIC_BASE_URL=" + f.stub.URL,
		"ANTHROPIC_API_KEY=x", "IS_SANDBOX=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"}
	out := f.keys.Output(info.WorkerID)
	last := "0-0"
	var direct, worker, share []float64
	for i := -1; i < 9; i++ { // the first round warms both up (the worker's image layers, claude's caches)
		cmd := exec.Command(claude, "-p", "do it", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions")
		cmd.Env, cmd.Dir = agentEnv, ws
		t0 := time.Now()
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("claude: %v\n%s", err, o)
		}
		d := time.Since(t0)

		t0 = time.Now()
		f.send(b, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "overhead-" + time.Now().Format("150405.000000"), Prompt: "do it", ForceNewSession: true})
		res, err := f.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{out, last}, Block: time.Minute}).Result()
		if err != nil {
			b.Fatal(err)
		}
		w := time.Since(t0)
		m := res[0].Messages[0]
		last = m.ID
		data, _ := protocol.EntryData(m.Values)
		o, err := protocol.DecodeOutput(data)
		if err != nil || o.Status != protocol.StatusComplete {
			b.Fatalf("worker task: %+v (%v)", o, err)
		}
		if i >= 0 {
			direct, worker = append(direct, ms(d)), append(worker, ms(w))
			share = append(share, ms(w)-float64(o.DurationMS))
		}
	}
	b.ReportMetric(median(direct), "direct-claude-host-median-ms")
	b.ReportMetric(median(worker), "worker-cpu-0.5-median-ms")
	b.ReportMetric(median(worker)/median(direct), "worker-cpu-0.5-ratio")
	b.ReportMetric(median(share), "worker-cpu-0.5-wrapper-share-median-ms")
}
