package spawner

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestMemoryHogIsOOMKilled(t *testing.T) {
	// The agent here is the fake one, which allocates memory until the
	// OOM killer ends it. Claude Code itself under a small limit does not
	// die on cgroup v1: the kernel keeps evicting and re-reading the page
	// cache of its 245 MB binary and the agent crawls on (measured: 27 MB
	// anonymous, millions of refaults, no OOM kill in 90 s at 32 MB; the
	// same at 16 and 256 MB), which only the task timeout ends.
	buildBenchBase(t)
	f := newFixture(t, func(c *Config) { useFakeAgent(c) })
	f.startManager(t)
	ctx := context.Background()
	spec := fakeSpec
	spec.Limits = protocol.Limits{Memory: "64m"}
	info, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "oom-1", Prompt: "use memory fake:hog"})
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("docker", "logs", ContainerName(info.WorkerID)).CombinedOutput()
			st, _ := exec.Command("docker", "inspect", "-f", "{{.State}}", ContainerName(info.WorkerID)).CombinedOutput()
			t.Logf("container state %s\nlogs:\n%s", st, logs)
		}
	})
	o := f.waitOutput(t, f.keys.Output(info.WorkerID), "oom-1", 60*time.Second)
	if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeOOMKilled || !o.Error.Retryable {
		t.Fatalf("output %+v error %+v", o, o.Error)
	}
	// The worker outlives its agent: the next task runs.
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "oom-2", Prompt: "small"})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "oom-2", 60*time.Second); o.Status != protocol.StatusComplete {
		t.Fatalf("task after the OOM kill: %+v", o)
	}
}

func TestDockerStopMidTask(t *testing.T) {
	f := newFixture(t, nil)
	f.startManager(t)
	ctx := context.Background()
	f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "slow", DelayMS: 60000}}})
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "stop-1", Prompt: "slow work"})
	testkit.Eventually(t, "the task running", 30*time.Second, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(info.WorkerID), protocol.StatusFieldRequestID).Val() == "stop-1"
	})
	time.Sleep(500 * time.Millisecond)
	if out, err := exec.Command("docker", "stop", "-t", "12", ContainerName(info.WorkerID)).CombinedOutput(); err != nil {
		t.Fatalf("docker stop: %v %s", err, out)
	}
	// The wrapper's grace (stop timeout − 10 s) runs out, it stops the
	// agent and publishes TERMINATED itself, then exits 0.
	o := f.waitOutput(t, f.keys.Output(info.WorkerID), "stop-1", 30*time.Second)
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeTerminated {
		t.Fatalf("output %+v error %+v", o, o.Error)
	}
	if n, _ := f.rc.XLen(ctx, f.keys.Output(info.WorkerID)).Result(); n != 1 {
		t.Fatalf("%d entries on the output stream, want exactly one output", n)
	}
}

// The engine crashes (SIGKILL) and comes back under a running manager, with
// a task in flight. The engine runs with live-restore (scripts/setup.sh):
// the container outlives dockerd, so the task completes, once, in the same
// incarnation; the manager reconnects to the event stream, and a crash
// after the restart is forwarded again.
func TestEngineRestartUnderTheManager(t *testing.T) {
	testkit.ExclusiveEngine(t, "..")
	f := newFixture(t, nil)
	f.startManager(t)
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	running := func(w protocol.WorkerInfo, req string) {
		f.send(t, f.keys.Input(w.WorkerID), protocol.Task{RequestID: req, Prompt: "slow"})
		testkit.Eventually(t, req+" running", time.Minute, func() bool {
			return f.rc.HGet(ctx, f.keys.Status(w.WorkerID), protocol.StatusFieldRequestID).Val() == req
		})
	}
	w1, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}", DelayMS: 8000}}})
	running(w1, "before-restart")
	restarted := time.Now()
	testkit.RestartEngine(t, "..", syscall.SIGKILL, nil)
	t.Logf("engine back after %v", time.Since(restarted))
	if live, err := f.dc.Info(ctx); err != nil || !live.LiveRestoreEnabled {
		t.Fatalf("the engine started by scripts/setup.sh runs without live-restore (%v)", err)
	}

	o := f.waitOutput(t, f.keys.Output(w1.WorkerID), "before-restart", time.Minute)
	if o.Status != protocol.StatusComplete {
		t.Fatalf("the task in flight across the engine's restart: %+v %+v", o, o.Error)
	}
	if n := countOutputs(t, f, f.keys.Output(w1.WorkerID), "before-restart"); n != 1 {
		t.Errorf("%d outputs for the task, want exactly 1", n)
	}
	if n := f.rc.HGet(ctx, f.keys.Status(w1.WorkerID), protocol.StatusFieldIncarnation).Val(); n != "1" {
		t.Errorf("incarnation %q after the engine's restart, want 1 (the container lived on)", n)
	}

	// The event stream is followed again: a crash now is forwarded.
	f.stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: "slow", DelayMS: 120000}})
	running(w1, "after-restart")
	if out, err := exec.Command("docker", "kill", "-s", "KILL", ContainerName(w1.WorkerID)).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if o := f.waitOutput(t, f.keys.Output(w1.WorkerID), "after-restart", 10*time.Second); o.Error == nil || o.Error.Code != protocol.CodeKilled {
		t.Fatalf("a crash after the restart: %+v", o)
	}
}

func countOutputs(t *testing.T, f *fixture, stream, requestID string) int {
	msgs, err := f.rc.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if o, err := protocol.DecodeOutput(data); err == nil && o.RequestID == requestID {
			n++
		}
	}
	return n
}
