package spawner

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

func (f *fixture) startManager(t testing.TB) *client.Commands {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = (&Manager{S: f.s}).Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testkit.Eventually(t, "the manager's presence", 30*time.Second, func() bool {
		return f.rc.Exists(context.Background(), f.keys.ManagerState(f.s.cfg.ManagerID)).Val() == 1
	})
	return &client.Commands{Redis: f.rc, Keys: f.keys, Timeout: 2 * time.Minute}
}

func TestManagerCommandsPauseWakeAndCrash(t *testing.T) {
	f := newFixture(t, nil)
	c := f.startManager(t)
	ctx := context.Background()

	r, err := c.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &protocol.WorkerSpec{AgentType: protocol.AgentClaude}})
	if err != nil || r.WorkerID == "" || r.Worker == nil || r.Worker.Status != protocol.ContainerRunning {
		t.Fatalf("create: %+v %v", r, err)
	}
	id := r.WorkerID
	if r, err := c.Do(ctx, protocol.Command{Action: protocol.ActionStatus, WorkerID: id}); err != nil || r.Worker.WorkerID != id {
		t.Fatalf("status: %+v %v", r, err)
	}
	if r, err := c.Do(ctx, protocol.Command{Action: protocol.ActionList}); err != nil || len(r.Workers) != 1 {
		t.Fatalf("list: %+v %v", r, err)
	}
	if _, err := c.Do(ctx, protocol.Command{Action: protocol.ActionStatus, WorkerID: "nobody"}); !IsNotFound(err) {
		t.Fatalf("status of nobody: %v", err)
	}
	f.rc.Set(ctx, f.keys.ProjectContext("p"), "old context", 0)
	if _, err := c.Do(ctx, protocol.Command{Action: protocol.ActionResetContext, ProjectID: "p", AgentType: protocol.AgentClaude}); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.rc.Exists(ctx, f.keys.ProjectContext("p")).Result(); n != 0 {
		t.Fatal("reset_context left the project's context")
	}
	// A malformed command is answered with INVALID_COMMAND and acknowledged.
	f.rc.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Commands(), Values: map[string]any{"data": `{"v":1,"type":"command","command_id":"bad-1","action":"explode","reply_to":"` + f.keys.Replies("bad") + `"}`}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		msgs, _ := f.rc.XRange(ctx, f.keys.Replies("bad"), "-", "+").Result()
		if len(msgs) == 1 {
			data, _ := protocol.EntryData(msgs[0].Values)
			rep, err := protocol.DecodeReply(data)
			if err != nil || rep.OK || rep.Error.Code != protocol.CodeInvalidCommand || rep.CommandID != "bad-1" {
				t.Fatalf("reply to a bad command: %+v %v", rep, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no reply to a bad command")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The history keeps the last protocol.MaxStatusHistory transitions
	// (health ones among them, which a loaded machine adds): the start's
	// is looked for now, the manager's after its pause and wake.
	testkit.Eventually(t, "the start in the history", 10*time.Second, func() bool {
		return slices.Contains(transitionsOf(t, f, id), "starting>idle (started)")
	})

	// The wrapper asks for a pause after its output; the manager pauses it.
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "m-1", Prompt: "first"})
	if o := f.waitOutput(t, f.keys.Output(id), "m-1", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("task 1: %+v", o)
	}
	testkit.Eventually(t, "the worker paused on its request", 15*time.Second, func() bool {
		st, _ := f.s.Status(ctx, id)
		return st.Status == protocol.ContainerPaused
	})
	// A new task wakes it and is served.
	start := time.Now()
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "m-2", Prompt: "second"})
	if o := f.waitOutput(t, f.keys.Output(id), "m-2", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("task 2: %+v", o)
	}
	t.Logf("paused worker woke and answered in %v", time.Since(start))
	// Killed mid-task: a failed output, classified, without waiting for a heartbeat.
	f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "slow", DelayMS: 30000}}})
	testkit.Eventually(t, "the worker paused again", 15*time.Second, func() bool {
		st, _ := f.s.Status(ctx, id)
		return st.Status == protocol.ContainerPaused
	})
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "m-3", Prompt: "third"})
	testkit.Eventually(t, "task 3 running", 30*time.Second, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldRequestID).Val() == "m-3"
	})
	// The manager's state changes are transitions too: in the worker's
	// history and on the lifecycle stream, with the time spent before.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		history := transitionsOf(t, f, id)
		seen := map[string]bool{}
		for _, h := range history {
			from, _, _ := strings.Cut(h, " ")
			seen[from] = true
		}
		if seen["idle>paused"] && seen["paused>idle"] && seen["idle>busy"] {
			break
		}
		if time.Now().After(deadline) {
			slices.Reverse(history)
			t.Fatalf("paused and woken not in the history within 10 s; the history, oldest first:\n%s", strings.Join(history, "\n"))
		}
	}
	// The manager moves a worker from idle (a pause) or paused (a wake)
	// only: never over the busy of the task that woke it.
	docs, _ := f.rc.LRange(ctx, f.keys.StatusHistory(id), 0, -1).Result()
	for _, d := range docs {
		if r, _ := protocol.DecodeTransitionRecord([]byte(d)); strings.HasPrefix(r.Reason, "spawner:") && r.From != protocol.WorkerIdle && r.From != protocol.WorkerPaused {
			t.Errorf("the manager moved the worker from %s: %+v", r.From, r)
		}
	}
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	if out, err := exec.Command("docker", "kill", "-s", "KILL", ContainerName(id)).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	o := f.waitOutput(t, f.keys.Output(id), "m-3", 10*time.Second)
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeKilled || !o.Error.Retryable {
		t.Fatalf("crash output %+v %+v", o, o.Error)
	}
	t.Logf("crash forwarded in %v", time.Since(killed))
	if run, _ := f.rc.HGet(ctx, f.keys.Run("m-3"), "status").Result(); run != "failed" {
		t.Errorf("run status %q", run)
	}
	// The worker lives on: a new container under its id.
	testkit.Eventually(t, "a new incarnation", 30*time.Second, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldIncarnation).Val() == "2"
	})
}

// transitionsOf returns a worker's history, newest first, as
// "from>to (reason)".
func transitionsOf(t *testing.T, f *fixture, id string) []string {
	t.Helper()
	docs, err := f.rc.LRange(context.Background(), f.keys.StatusHistory(id), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range docs {
		if r, err := protocol.DecodeTransitionRecord([]byte(d)); err == nil && r.Reason != "" {
			out = append(out, string(r.From)+">"+string(r.To)+" ("+r.Reason+")")
		}
	}
	return out
}

func TestShutdownLeavesNoContainer(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		if _, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := f.s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if cs := containersOf(t, f); len(cs) != 0 {
		t.Fatalf("%d containers left", len(cs))
	}
	if ws, _ := f.s.List(ctx); len(ws) != 4 || ws[0].Status != protocol.ContainerHibernated {
		t.Fatalf("after the shutdown, workers %+v: want 4 hibernated", ws)
	}
	t.Logf("4 workers hibernated in %v", time.Since(start))
}

// A create that asks for DOCKER is answered with a warning: the
// worker's containers and images go when it hibernates or is deleted.
func TestDockerCapabilityIsAnsweredWithAWarning(t *testing.T) {
	f := newFixture(t, nil)
	c := f.startManager(t)
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Capabilities: []protocol.Capability{protocol.CapDocker}}
	reply, err := c.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Warnings) != 1 || reply.Warnings[0] != protocol.DockerWarning {
		t.Fatalf("create with DOCKER: warnings %q", reply.Warnings)
	}
	if _, err := c.Do(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: reply.WorkerID}); err != nil {
		t.Fatal(err)
	}
}
