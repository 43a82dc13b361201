package spawner

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// containersOf lists the containers (any state) of a fixture's prefix.
func containersOf(t *testing.T, f *fixture) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+protocol.LabelKeyPrefix+"="+f.keys.Prefix).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// workerContainersOf lists the workers' containers (any state) of a
// fixture's prefix, without the spare network namespaces' holders
// (engine/docker/netns.go), which carry the prefix but are no workers.
func workerContainersOf(t testing.TB, f *fixture) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+protocol.LabelKeyPrefix+"="+f.keys.Prefix,
		"--filter", "label="+protocol.LabelManaged+"=true").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// waitHibernated waits until a worker is hibernated with no container.
func waitHibernated(t testing.TB, f *fixture, id string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	testkit.Eventually(t, "worker "+id+" hibernated", within, func() bool {
		h := f.rc.HGetAll(ctx, f.keys.Status(id)).Val()
		_, err := f.s.inst.find(ctx, id)
		return h[protocol.StatusFieldState] == string(protocol.WorkerHibernated) &&
			h[protocol.StatusFieldContainer] == string(protocol.ContainerHibernated) && IsNotFound(err)
	})
}

// hibernatedWorker creates a worker of spec and hibernates it.
func hibernatedWorker(t *testing.T, f *fixture, spec protocol.WorkerSpec) string {
	t.Helper()
	info, err := f.s.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.Hibernate(context.Background(), info.WorkerID); err != nil {
		t.Fatal(err)
	}
	waitHibernated(t, f, info.WorkerID, 30*time.Second)
	return info.WorkerID
}

// A worker idle past HIBERNATE_AFTER loses its container and its slot,
// keeps its id, and a task sent to it wakes it as a new incarnation that
// answers it.
func TestIdleWorkerHibernatesAndATaskWakesIt(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.HibernateAfter = 2 * time.Second; c.MaxWorkers = 1; c.KeepIdleAtLimit = true })
	f.startManager(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "sleepy"})
	if err != nil {
		t.Fatal(err)
	}
	id := info.WorkerID
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "hib-1", Prompt: "first"})
	if o := f.waitOutput(t, f.keys.Output(id), "hib-1", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("task 1: %+v", o)
	}
	waitHibernated(t, f, id, 30*time.Second)
	// The event follows the status: the hibernation's last step.
	testkit.Eventually(t, "the hibernated event", 10*time.Second, func() bool {
		return f.countEvents(t, id, protocol.EventHibernated) >= 1
	})
	if n := f.countEvents(t, id, protocol.EventHibernated); n != 1 {
		t.Errorf("%d hibernated events", n)
	}
	workers, creating, retiring, err := f.s.rdb.Slots(ctx)
	if err != nil || len(workers)+len(creating)+len(retiring) != 0 {
		t.Fatalf("slots held by a hibernated worker: %v %v %v %v", workers, creating, retiring, err)
	}
	if st, err := f.s.Status(ctx, id); err != nil || st.Status != protocol.ContainerHibernated {
		t.Fatalf("status of a hibernated worker: %+v %v", st, err)
	}
	// The slot is free: another worker fits under MAX_CONCURRENT_WORKERS=1
	// for a while, then goes.
	other, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatalf("a create in the hibernated worker's slot: %v", err)
	}
	if err := f.s.Delete(ctx, other.WorkerID); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "hib-2", Prompt: "second"})
	o := f.waitOutput(t, f.keys.Output(id), "hib-2", time.Minute)
	if o.Status != protocol.StatusComplete || o.WorkerID != id {
		t.Fatalf("the task that woke it: %+v %+v", o, o.Error)
	}
	t.Logf("woken and answered in %v", time.Since(start))
	if n := f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldIncarnation).Val(); n != "2" {
		t.Errorf("incarnation %q after the wake, want 2", n)
	}
	if n := f.countEvents(t, id, protocol.EventCreated); n != 2 {
		t.Errorf("%d created events, want 2 (create, wake)", n)
	}
	if n := f.countEvents(t, id, protocol.EventRemoved); n != 0 {
		t.Errorf("%d removed events: hibernation ended the identity", n)
	}
}

// A delete that comes while a wake waits for its slot wins: the task that
// asked for the wake is answered WORKER_GONE, once, and no container is
// left of the worker.
func TestDeleteWinsOverAWake(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxWorkers = 1; c.KeepIdleAtLimit = true })
	f.startManager(t)
	ctx := context.Background()
	id := hibernatedWorker(t, f, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	blocker, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	// The wake queues behind the full limit, holding its lease.
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "race-1", Prompt: "wake up"})
	testkit.Eventually(t, "the wake queued", 15*time.Second, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldContainer).Val() == string(protocol.ContainerQueued)
	})
	if err := f.s.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	o := f.waitOutput(t, f.keys.Output(id), "race-1", 10*time.Second)
	if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeWorkerGone {
		t.Fatalf("the task of a worker deleted as it woke: %+v %+v", o, o.Error)
	}
	// The slot frees; the wake goes on and finds the worker gone.
	if err := f.s.Delete(ctx, blocker.WorkerID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if _, err := f.s.inst.find(ctx, id); !IsNotFound(err) {
		t.Fatalf("a container of the deleted worker: %v", err)
	}
	if f.rc.SIsMember(ctx, f.keys.Workers(), id).Val() {
		t.Fatal("the deleted worker is a member")
	}
	workers, creating, _, _ := f.s.rdb.Slots(ctx)
	if len(workers)+len(creating) != 0 {
		t.Fatalf("slots left: %v %v", workers, creating)
	}
	if n := countOutputs(t, f, f.keys.Output(id), "race-1"); n != 1 {
		t.Errorf("%d outputs for the task, want 1", n)
	}
	if st := f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldState).Val(); st != string(protocol.WorkerStopped) {
		t.Errorf("state %q of the deleted worker", st)
	}
	// A task sent afterwards is answered WORKER_GONE by the leader.
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "race-2", Prompt: "late"})
	if o := f.waitOutput(t, f.keys.Output(id), "race-2", 30*time.Second); o.Error == nil || o.Error.Code != protocol.CodeWorkerGone {
		t.Fatalf("a task after the delete: %+v", o)
	}
}

// A manager's stop hibernates its workers (no container left); the next
// task to each, under a manager started again, wakes it and is answered.
func TestManagerStopHibernatesAndTheNextTaskWakes(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = (&Manager{S: f.s}).Run(mctx) }()
	var ids []string
	for i := 0; i < 2; i++ {
		info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "stop"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.WorkerID)
	}
	f.send(t, f.keys.Input(ids[0]), protocol.Task{RequestID: "before-stop", Prompt: "hello"})
	if o := f.waitOutput(t, f.keys.Output(ids[0]), "before-stop", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("before the stop: %+v", o)
	}
	cancel()
	<-done
	if err := f.s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if cs := containersOf(t, f); len(cs) != 0 {
		t.Fatalf("%d containers left after the stop", len(cs))
	}
	for _, id := range ids {
		waitHibernated(t, f, id, time.Second)
	}
	// With no manager running (its host has left the fleet's hosts), a
	// consumer still finds them: they are workers, hibernated.
	listed, err := (&client.Fleet{Redis: f.rc, Keys: f.keys}).Workers(ctx)
	if err != nil || !slices.Contains(listed, ids[0]) || !slices.Contains(listed, ids[1]) {
		t.Fatalf("the workers a consumer lists after the stop: %v %v, want both hibernated ones", listed, err)
	}

	again := f.as(f.s.cfg.ManagerID)
	mctx, cancel = context.WithCancel(ctx)
	done = make(chan struct{})
	go func() { defer close(done); _ = (&Manager{S: again}).Run(mctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for i, id := range ids {
		req := "after-restart-" + string(rune('a'+i))
		f.send(t, f.keys.Input(id), protocol.Task{RequestID: req, Prompt: "hello again"})
		if o := f.waitOutput(t, f.keys.Output(id), req, time.Minute); o.Status != protocol.StatusComplete || o.WorkerID != id {
			t.Fatalf("a task to %s after the restart: %+v %+v", id, o, o.Error)
		}
	}
}

// A hibernated worker whose project volume is gone (as on another host)
// resumes its session from the session store: the agent's transcript is
// restored before the resume, and the model sees the earlier turns.
func TestWokenWorkerResumesItsSessionFromTheStore(t *testing.T) {
	f := newFixture(t, nil)
	f.startManager(t)
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "moved"}
	info, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	id := info.WorkerID
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("docker", "logs", "--tail", "60", ContainerName(id)).CombinedOutput()
			ls, _ := exec.Command("docker", "exec", ContainerName(id), "find", "/home/worker", "-name", "*.jsonl").CombinedOutput()
			t.Logf("logs:\n%s\nsession files:\n%s", logs, ls)
		}
	})
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "sess-1", ProjectID: "moved", Prompt: "remember the code word pelican"})
	if o := f.waitOutput(t, f.keys.Output(id), "sess-1", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("task 1: %+v", o)
	}
	testkit.Eventually(t, "the session's files stored", 10*time.Second, func() bool {
		return f.rc.Exists(ctx, f.keys.SessionFiles(protocol.AgentClaude, "moved")).Val() == 1
	})
	if err := f.s.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitHibernated(t, f, id, 30*time.Second)
	vol := ProjectVolume(f.keys.Prefix, protocol.AgentClaude, "moved")
	if err := f.s.RemoveVolume(ctx, vol); err != nil { // its disk (the default disk limit) or Docker's volume
		t.Fatalf("remove the project volume: %v", err)
	}
	f.stub.Reset()
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "sess-2", ProjectID: "moved", Prompt: "what was the code word?"})
	o := f.waitOutput(t, f.keys.Output(id), "sess-2", time.Minute)
	if o.Status != protocol.StatusComplete || o.Session == nil || o.Session.Action != protocol.SessionResume || o.Session.ResumeError != nil {
		t.Fatalf("task 2 after the wake on a new volume: %+v session %+v", o, o.Session)
	}
	seen := false
	for _, r := range f.stub.Requests() {
		for _, m := range r.Messages {
			seen = seen || strings.Contains(string(m), "pelican")
		}
	}
	if !seen {
		t.Fatal("the model did not see the earlier turns: the session was not restored")
	}
}

// Two managers that wake the same hibernated worker at once make one new
// incarnation: the wake lease lets one through, the other finds the
// worker woken.
func TestTwoWakesMakeOneIncarnation(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	id := hibernatedWorker(t, f, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	other := f.as("manager-2")
	errs := make(chan error, 2)
	for _, s := range []*Spawner{f.s, other} {
		go func() { errs <- s.hib.wakeHibernated(ctx, id) }()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("a wake: %v", err)
		}
	}
	if n := f.countEvents(t, id, protocol.EventCreated); n != 2 {
		t.Fatalf("%d created events, want 2 (the create, one wake)", n)
	}
	if n := f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldIncarnation).Val(); n != "2" {
		t.Fatalf("incarnation %q", n)
	}
	if cs := workerContainersOf(t, f); len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	if !f.rc.SIsMember(ctx, f.keys.Workers(), id).Val() {
		t.Fatal("the woken worker is not a member")
	}
}

// A create that names a hibernated worker of the same agent and project
// (its worker_id) is answered with that worker, woken; one that names a
// worker of another project, or none that exists, gets a new worker and
// a warning saying so.
func TestCreateNamingAHibernatedWorkerWakesIt(t *testing.T) {
	f := newFixture(t, nil)
	f.startManager(t)
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "again"}
	id := hibernatedWorker(t, f, spec)
	c := parts{f.s}.commands(1)
	create := func(name string, spec protocol.WorkerSpec) protocol.Reply {
		reply := protocol.Reply{OK: true}
		c.runCommand(ctx, protocol.Command{ID: "c-" + name, Action: protocol.ActionCreate, WorkerID: name, Spec: &spec}, &reply, nil)
		return reply
	}
	r := create(id, spec)
	if !r.OK || r.WorkerID != id || r.Worker == nil || r.Worker.Status != protocol.ContainerRunning {
		t.Fatalf("create naming the hibernated worker: %+v %+v", r, r.Error)
	}
	if n := f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldIncarnation).Val(); n != "2" {
		t.Errorf("incarnation %q after the create woke it, want 2", n)
	}
	// Named again while it runs: the same worker, nothing made.
	if r := create(id, spec); !r.OK || r.WorkerID != id {
		t.Fatalf("create naming the running worker: %+v", r)
	}
	if n := f.countEvents(t, id, protocol.EventCreated); n != 2 {
		t.Errorf("%d created events, want 2 (create, wake)", n)
	}
	for _, tc := range []struct {
		name string
		spec protocol.WorkerSpec
	}{{id, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "other"}}, {"no-such-worker", spec}} {
		r := create(tc.name, tc.spec)
		if !r.OK || r.WorkerID == "" || r.WorkerID == id || len(r.Warnings) == 0 || !strings.Contains(r.Warnings[0], "a new worker was made") {
			t.Fatalf("create naming %s for project %s: %+v", tc.name, tc.spec.ProjectID, r)
		}
		if err := f.s.Delete(ctx, r.WorkerID); err != nil {
			t.Fatal(err)
		}
	}
}
