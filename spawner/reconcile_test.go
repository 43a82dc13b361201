package spawner

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestDeadIdlePausedAndOrphans(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.HeartbeatInterval = time.Second
		c.IdleTimeout = 2 * time.Second
		c.PauseTimeout = 3 * time.Second
		c.CreationGrace = time.Second
		c.ReconcileInterval = time.Hour // the test calls Reconcile itself
	})
	f.startManager(t)
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}

	// Idle past IDLE_TIMEOUT → paused; paused past PAUSE_TIMEOUT → terminated.
	idle, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the idle worker paused", 15*time.Second, func() bool {
		st, _ := f.s.Status(ctx, idle.WorkerID)
		return st.Status == protocol.ContainerPaused
	})
	testkit.Eventually(t, "the paused worker terminated", 15*time.Second, func() bool {
		_, err := f.s.inst.find(ctx, idle.WorkerID)
		return IsNotFound(err)
	})

	// A running worker whose heartbeat stops (its wrapper frozen by
	// SIGSTOP, the container still running) is dead within two intervals
	// of the key's expiry, and removed.
	f.s.cfg.IdleTimeout = time.Hour
	frozen, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "a first heartbeat", 15*time.Second, func() bool {
		n, _ := f.rc.Exists(ctx, f.keys.Heartbeat(frozen.WorkerID)).Result()
		return n == 1
	})
	if out, err := exec.Command("docker", "kill", "-s", "STOP", ContainerName(frozen.WorkerID)).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	stopped := time.Now()
	// A task sent now is never read by the frozen wrapper: the worker's
	// next incarnation serves it.
	f.send(t, f.keys.Input(frozen.WorkerID), protocol.Task{RequestID: "waiting-on-frozen", Prompt: "hello"})
	testkit.Eventually(t, "the frozen worker declared dead", 20*time.Second, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(frozen.WorkerID), protocol.StatusFieldExitCode).Val() != ""
	})
	// TTL is three intervals; detection within two more.
	if d := time.Since(stopped); d > 6*time.Second {
		t.Errorf("dead after %v, want within 3+2 heartbeat intervals (5 s)", d)
	}
	// Its stale heartbeat made it degraded before it was declared dead.
	var evs []string
	msgs, _ := f.rc.XRange(ctx, f.keys.Lifecycle(), "-", "+").Result()
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if l, err := protocol.DecodeLifecycle(data); err == nil && l.WorkerID == frozen.WorkerID && l.Source == protocol.SourceSpawner {
			evs = append(evs, string(l.Event))
		}
	}
	if got := strings.Join(evs, ","); !strings.Contains(got, "degraded,dead") {
		t.Errorf("spawner events of the frozen worker: %s, want degraded then dead", got)
	}
	// Then a new incarnation under the same id serves the task that
	// waited on its input.
	if o := f.waitOutput(t, f.keys.Output(frozen.WorkerID), "waiting-on-frozen", time.Minute); o.Status != protocol.StatusComplete {
		t.Errorf("the waiting task: %+v", o)
	}
	if n := f.rc.HGet(ctx, f.keys.Status(frozen.WorkerID), protocol.StatusFieldIncarnation).Val(); n != "2" {
		t.Errorf("incarnation %q after the death, want 2", n)
	}

	// A labelled container Redis does not know is an orphan.
	out, err := exec.Command("docker", "run", "-d", "--label", protocol.LabelManaged+"=true",
		"--label", protocol.LabelKeyPrefix+"="+f.keys.Prefix, "--label", protocol.LabelWorkerID+"=ghost",
		"--entrypoint", "/bin/sleep", "agentvisor/worker-base:latest", "300").CombinedOutput()
	if err != nil {
		t.Fatalf("%v %s", err, out)
	}
	ghost := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", ghost).Run() })
	f.rc.SAdd(ctx, f.keys.Workers(), "gone-worker") // and a worker whose container is gone
	time.Sleep(1100 * time.Millisecond)             // past the creation grace
	rep, err := f.s.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphansRemoved != 1 || rep.MissingMarked != 1 {
		t.Fatalf("reconcile: %+v", rep)
	}
	if err := exec.Command("docker", "inspect", ghost).Run(); err == nil {
		t.Fatal("the orphan container is still there")
	}
}

// A worker whose container was removed while no manager watched (no die
// event seen) is found by reconciliation, and its task in flight answered.
func TestReconcileAnswersTheTaskOfAVanishedWorker(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: "slow", DelayMS: 120000}})
	w, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(w.WorkerID), protocol.Task{RequestID: "vanished", Prompt: "slow"})
	testkit.Eventually(t, "the task running", time.Minute, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(w.WorkerID), protocol.StatusFieldRequestID).Val() == "vanished"
	})
	if out, err := exec.Command("docker", "rm", "-f", ContainerName(w.WorkerID)).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	rep, err := f.s.Reconcile(ctx)
	if err != nil || rep.MissingMarked != 1 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}
	o := f.waitOutput(t, f.keys.Output(w.WorkerID), "vanished", 5*time.Second)
	if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeKilled {
		t.Fatalf("output of the vanished worker's task: %+v", o)
	}
	if st := f.rc.HGet(ctx, f.keys.Run("vanished"), "status").Val(); st != "failed" {
		t.Errorf("run status %q, want failed", st)
	}
}
