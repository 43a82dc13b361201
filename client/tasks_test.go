package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/client/internal/redistest"
	"github.com/agentvisor/agentvisor/protocol"
)

// Tasks on a real Redis, with the worker's side played by hand: the task
// lands on the input stream, progress and then the output of this task
// are delivered (an older output and another task's are not), and a
// deadline gives ErrAwaitTimeout.
func TestTasksSendWatchAwait(t *testing.T) {
	rc := redistest.NewClient(t)
	keys := protocol.Keys{Prefix: "taskstest"}
	ctx := context.Background()
	tasks := &Tasks{Redis: rc, Keys: keys}

	if _, err := tasks.Send(ctx, "w1", protocol.Task{Prompt: "x", ProjectID: "p"}); !IsNotFound(err) {
		t.Fatalf("send to a worker with no status: %v, want NOT_FOUND", err)
	}
	rc.HSet(ctx, keys.Status("w1"), protocol.StatusFieldKind, string(protocol.KindLongLived))
	if _, err := tasks.Send(ctx, "w1", protocol.Task{ProjectID: "p"}); !HasCode(err, protocol.CodeInvalidTask) {
		t.Fatalf("send without a prompt: %v, want INVALID_TASK", err)
	}
	// An output of an earlier task with the same id is history, not ours.
	redistest.XAdd(t, rc, keys.Output("w1"), redistest.Doc(protocol.Output{Timestamp: time.Now(), RequestID: "r1", WorkerID: "w1", Status: protocol.StatusFailed,
		Error: &protocol.Error{Code: protocol.CodeKilled, Message: "old"}}))
	sent, err := tasks.Send(ctx, "w1", protocol.Task{RequestID: "r1", ProjectID: "p", Prompt: "Do it."})
	if err != nil {
		t.Fatal(err)
	}
	in, err := rc.XRange(ctx, keys.Input("w1"), "-", "+").Result()
	if err != nil || len(in) != 1 {
		t.Fatalf("input stream: %v %v", in, err)
	}
	if data, _ := protocol.EntryData(in[0].Values); data == nil {
		t.Fatal("input entry has no data")
	} else if task, err := protocol.DecodeTask(data); err != nil || task.Prompt != "Do it." {
		t.Fatalf("task on the input: %+v %v", task, err)
	}

	go func() {
		time.Sleep(50 * time.Millisecond)
		pct := 50
		redistest.XAdd(t, rc, keys.Output("w1"), redistest.Doc(protocol.Progress{Timestamp: time.Now(), WorkerID: "w1", RequestID: "other", Step: "not ours"}))
		redistest.XAdd(t, rc, keys.Output("w1"), redistest.Doc(protocol.Progress{Timestamp: time.Now(), WorkerID: "w1", RequestID: "r1", Step: "half", ProgressPct: &pct}))
		redistest.XAdd(t, rc, keys.Output("w1"), redistest.Doc(protocol.Output{Timestamp: time.Now(), RequestID: "r1", WorkerID: "w1", Status: protocol.StatusComplete,
			Result: []byte(`{"ok":true}`)}))
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var steps []string
	o, err := tasks.Await(wctx, sent, func(p protocol.Progress) { steps = append(steps, p.Step) })
	if err != nil || o.Status != protocol.StatusComplete || string(o.Result) != `{"ok":true}` {
		t.Fatalf("await: %+v %v", o, err)
	}
	if len(steps) != 1 || steps[0] != "half" {
		t.Fatalf("progress seen: %v", steps)
	}

	// No output: the deadline ends the wait with ErrAwaitTimeout.
	sent2, err := tasks.Send(ctx, "w1", protocol.Task{RequestID: "r2", ProjectID: "p", Prompt: "Again."})
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	start := time.Now()
	if _, err := tasks.Await(tctx, sent2, nil); !errors.Is(err, ErrAwaitTimeout) {
		t.Fatalf("await with no output: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the deadline was kept late: %v", took)
	}
}

// A task sent has its run from the start, requested, with its worker and
// project; a run that exists (a request id sent again) is left as it is.
func TestSendCreatesTheRun(t *testing.T) {
	rc := redistest.NewClient(t)
	keys := protocol.Keys{Prefix: "runsent"}
	ctx := context.Background()
	tasks := &Tasks{Redis: rc, Keys: keys}
	rc.HSet(ctx, keys.Status("w1"), protocol.StatusFieldKind, string(protocol.KindLongLived), protocol.StatusFieldAgentType, string(protocol.AgentDroid))
	rc.HSet(ctx, keys.Status("d1"), protocol.StatusFieldKind, string(protocol.KindDeveloper))
	if _, err := tasks.Send(ctx, "w1", protocol.Task{RequestID: "r1", TaskID: "T-1", ProjectID: "p", Prompt: "x", Trigger: "manual"}); err != nil {
		t.Fatal(err)
	}
	run, err := protocol.RunFromHash(rc.HGetAll(ctx, keys.Run("r1")).Val())
	if err != nil || run.State != protocol.RunRequested || run.WorkerID != "w1" || run.ProjectID != "p" || run.TaskID != "T-1" || run.CreatedAt.IsZero() ||
		run.AgentSlug != "droid" || run.Trigger != "manual" {
		t.Fatalf("run after send: %+v %v", run, err)
	}
	if _, err := tasks.Send(ctx, "d1", protocol.Task{RequestID: "r2", ProjectID: "p", Prompt: "x"}); err != nil {
		t.Fatal(err)
	}
	if h := rc.HGetAll(ctx, keys.Run("r2")).Val(); h[protocol.RunFieldStatus] != "requested" || h[protocol.RunFieldWorkerID] != "" {
		t.Fatalf("a developer task's run: %v (its worker is whichever reads it)", h)
	}
	rc.HSet(ctx, keys.Run("r1"), protocol.RunFieldStatus, "completed")
	if _, err := tasks.Send(ctx, "w1", protocol.Task{RequestID: "r1", ProjectID: "p", Prompt: "x"}); err != nil {
		t.Fatal(err)
	}
	if st := rc.HGet(ctx, keys.Run("r1"), protocol.RunFieldStatus).Val(); st != "completed" {
		t.Fatalf("a finished run sent again: %s", st)
	}
}

// A developer task goes to its priority's queue; its cancel goes to the
// normal queue, where every developer worker follows the cancels of any
// priority. A long-lived worker's task goes to its input whatever its
// priority.
func TestSendRoutesDeveloperTasksByPriority(t *testing.T) {
	rc := redistest.NewClient(t)
	keys := protocol.Keys{Prefix: "priotest"}
	ctx := context.Background()
	tasks := &Tasks{Redis: rc, Keys: keys}
	rc.HSet(ctx, keys.Status("dev"), protocol.StatusFieldKind, string(protocol.KindDeveloper))
	rc.HSet(ctx, keys.Status("ll"), protocol.StatusFieldKind, string(protocol.KindLongLived))
	for _, p := range []protocol.Priority{"", protocol.PriorityHigh, protocol.PriorityNormal, protocol.PriorityLow} {
		sent, err := tasks.Send(ctx, "dev", protocol.Task{RequestID: "r-" + string(p.Or()) + string(p), Prompt: "x", Priority: p})
		if err != nil {
			t.Fatal(err)
		}
		if sent.Input != keys.DeveloperInputFor(p) || sent.Control != keys.DeveloperInput() {
			t.Errorf("priority %q: input %s, control %s", p, sent.Input, sent.Control)
		}
		if err := tasks.Cancel(ctx, sent, "no"); err != nil {
			t.Fatal(err)
		}
	}
	count := func(stream string) int64 { n, _ := rc.XLen(ctx, stream).Result(); return n }
	if h, n, l := count(keys.DeveloperInputFor(protocol.PriorityHigh)), count(keys.DeveloperInput()), count(keys.DeveloperInputFor(protocol.PriorityLow)); h != 1 || n != 2+4 || l != 1 {
		t.Errorf("high %d, normal %d (2 tasks, 4 cancels), low %d", h, n, l)
	}
	sent, err := tasks.Send(ctx, "ll", protocol.Task{Prompt: "x", Priority: protocol.PriorityHigh})
	if err != nil || sent.Input != keys.Input("ll") || sent.Control != keys.Input("ll") {
		t.Errorf("long-lived: %+v %v", sent, err)
	}
	if _, err := tasks.Send(ctx, "dev", protocol.Task{Prompt: "x", Priority: "urgent"}); !HasCode(err, protocol.CodeInvalidTask) {
		t.Errorf("priority urgent: %v, want INVALID_TASK", err)
	}
}

// A message to a running task is a message document on the task's input
// stream; an empty one is refused with INVALID_COMMAND and not written.
func TestTasksMessage(t *testing.T) {
	rc := redistest.NewClient(t)
	keys := protocol.Keys{Prefix: "msgtest"}
	ctx := context.Background()
	tasks := &Tasks{Redis: rc, Keys: keys}
	s := Sent{RequestID: "r1", WorkerID: "w1", Input: keys.Input("w1")}
	if err := tasks.Message(ctx, s, ""); !HasCode(err, protocol.CodeInvalidCommand) {
		t.Fatalf("an empty message: %v, want INVALID_COMMAND", err)
	}
	if err := tasks.Message(ctx, s, "use the v2 API"); err != nil {
		t.Fatal(err)
	}
	in, err := rc.XRange(ctx, keys.Input("w1"), "-", "+").Result()
	if err != nil || len(in) != 1 {
		t.Fatalf("input stream: %v %v", in, err)
	}
	data, _ := protocol.EntryData(in[0].Values)
	if m, err := protocol.DecodeMessage(data); err != nil || m.RequestID != "r1" || m.Text != "use the v2 API" {
		t.Fatalf("message written: %+v %v", m, err)
	}
}
