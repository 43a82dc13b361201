package spawner

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// A worker's container killed mid-task: the task is answered once, a new
// container (incarnation 2) comes up under the same worker id, keeping its
// socket directory, and a task sent to that id afterwards is answered.
func TestKilledWorkerLivesOnUnderItsID(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ReplaceBackoff = 100 * time.Millisecond })
	f.startManager(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	id := info.WorkerID
	if n := f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldIncarnation).Val(); n != "1" {
		t.Fatalf("first incarnation %q", n)
	}
	first := f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldContainerID).Val()
	f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "slow", DelayMS: 60000}}})
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "inc-1", Prompt: "slow"})
	testkit.Eventually(t, "the task running", 30*time.Second, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldRequestID).Val() == "inc-1"
	})
	// A task waiting behind the one in flight is the new incarnation's.
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "inc-2", Prompt: "waiting"})
	time.Sleep(300 * time.Millisecond)
	if out, err := exec.Command("docker", "kill", "-s", "KILL", ContainerName(id)).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	o := f.waitOutput(t, f.keys.Output(id), "inc-1", 15*time.Second)
	if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeKilled || o.WorkerID != id {
		t.Fatalf("the killed task's output %+v %+v", o, o.Error)
	}
	f.stub.SetScript(stubmodel.Script{})
	testkit.Eventually(t, "a new incarnation running under the same id", 60*time.Second, func() bool {
		h := f.rc.HGetAll(ctx, f.keys.Status(id)).Val()
		return h[protocol.StatusFieldIncarnation] == "2" && h[protocol.StatusFieldContainer] == string(protocol.ContainerRunning) &&
			h[protocol.StatusFieldContainerID] != first && f.rc.SIsMember(ctx, f.keys.Workers(), id).Val()
	})
	if o := f.waitOutput(t, f.keys.Output(id), "inc-2", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the task that waited: %+v %+v", o, o.Error)
	}
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "inc-3", Prompt: "after"})
	if o := f.waitOutput(t, f.keys.Output(id), "inc-3", time.Minute); o.Status != protocol.StatusComplete || o.WorkerID != id {
		t.Fatalf("a task sent after the death: %+v %+v", o, o.Error)
	}
	if n := countOutputs(t, f, f.keys.Output(id), "inc-1"); n != 1 {
		t.Errorf("%d outputs for the killed task, want 1", n)
	}
	if n := f.countEvents(t, id, protocol.EventRemoved); n != 0 {
		t.Errorf("%d removed events: the identity did not end", n)
	}
	if n := f.countEvents(t, id, protocol.EventCreated); n != 2 {
		t.Errorf("%d created events, want one per incarnation", n)
	}
	// Deleting the worker ends the identity: no third incarnation.
	if err := f.s.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if f.rc.SIsMember(ctx, f.keys.Workers(), id).Val() {
		t.Fatal("a deleted worker is back")
	}
	if n := f.countEvents(t, id, protocol.EventCreated); n != 2 {
		t.Errorf("%d created events after the delete", n)
	}
}

// A worker that keeps dying before it completes a task gets at most
// MaxReplacements new incarnations, then is retired (REPLACE_LIMIT).
func TestWorkerThatKeepsDyingIsRetiredAtTheCap(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ReplaceBackoff = 50 * time.Millisecond; c.MaxReplacements = 2 })
	f.startManager(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	id := info.WorkerID
	for i := 1; i <= 3; i++ {
		want := strconv.Itoa(i)
		testkit.Eventually(t, "incarnation "+want+" running", 60*time.Second, func() bool {
			h := f.rc.HGetAll(ctx, f.keys.Status(id)).Val()
			return h[protocol.StatusFieldIncarnation] == want && h[protocol.StatusFieldContainer] == string(protocol.ContainerRunning)
		})
		if out, err := exec.Command("docker", "kill", "-s", "KILL", ContainerName(id)).CombinedOutput(); err != nil {
			t.Fatalf("docker kill: %v %s", err, out)
		}
	}
	testkit.Eventually(t, "the worker retired at the cap", 30*time.Second, func() bool {
		return f.countEvents(t, id, protocol.EventRemoved) == 1
	})
	if n := f.countEvents(t, id, protocol.EventReplaceFailed); n != 1 {
		t.Errorf("%d replace_failed events", n)
	}
	if f.rc.SIsMember(ctx, f.keys.Workers(), id).Val() {
		t.Error("still a member")
	}
}
