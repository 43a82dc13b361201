package spawner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
	dto "github.com/prometheus/client_model/go"
)

// A worker its own tasks degraded (its agent crashing, task after task)
// that stays idle and degraded for REPLACE_DEGRADED_AFTER is retired and
// lives on as a new incarnation under its id, healthy, which serves the
// next task.
func TestADegradedWorkerIsReplaced(t *testing.T) {
	buildBenchBase(t)
	f := newFixture(t, func(c *Config) {
		useFakeAgent(c)
		c.WorkerEnv["DEGRADED_COOLDOWN"] = "600"    // no health check of its own within the test
		c.WorkerEnv["PAUSE_AFTER_OUTPUT"] = "false" // running idle (a paused worker is hibernated in time, and wakes healthy)
		c.HeartbeatInterval, c.ReplaceDegradedAfter, c.ReplaceBackoff = time.Second, 2*time.Second, 10*time.Millisecond
	})
	m := NewMetrics(f.rc, f.keys, 1)
	f.s.UseMetrics(m, "")
	f.startManager(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, fakeSpec)
	if err != nil {
		t.Fatal(err)
	}
	id := info.WorkerID
	for i := range protocol.DegradeAfterFailures {
		req := fmt.Sprintf("crash-%d", i)
		f.send(t, f.keys.Input(id), protocol.Task{RequestID: req, Prompt: "fake:crash-after-init"})
		if o := f.waitOutput(t, f.keys.Output(id), req, time.Minute); o.Status != protocol.StatusFailed {
			t.Fatalf("task %s: %+v", req, o)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("status: %v", f.rc.HGetAll(ctx, f.keys.Status(id)).Val())
		}
	})
	testkit.Eventually(t, "a new incarnation, healthy", time.Minute, func() bool {
		h := f.rc.HGetAll(ctx, f.keys.Status(id)).Val()
		return h[protocol.StatusFieldIncarnation] == "2" && h[protocol.StatusFieldContainer] == string(protocol.ContainerRunning) &&
			h[protocol.StatusFieldHealth] != string(protocol.HealthDegraded)
	})
	var rounds dto.Metric
	if err := m.healthSeconds.Write(&rounds); err != nil || rounds.GetHistogram().GetSampleCount() == 0 {
		t.Errorf("agentvisor_health_check_duration_seconds: %d rounds (%v), want some", rounds.GetHistogram().GetSampleCount(), err)
	}
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "after", Prompt: "work"})
	if o := f.waitOutput(t, f.keys.Output(id), "after", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the task after the replacement: %+v", o)
	}
}
