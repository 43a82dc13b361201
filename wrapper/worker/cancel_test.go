package worker

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// sendCancel adds a cancel document to stream.
func (e *env) sendCancel(stream, requestID, reason string) {
	e.t.Helper()
	e.sendDoc(stream)(protocol.NewCancel(requestID, reason).Encode())
}

// sendDoc returns a function that adds an encoded document to stream:
// e.sendDoc(stream)(doc.Encode()).
func (e *env) sendDoc(stream string) func(doc []byte, err error) {
	return func(doc []byte, err error) {
		e.t.Helper()
		if err != nil {
			e.t.Fatal(err)
		}
		if err := e.rc.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// outputOf waits for the output of requestID on the worker's stream.
func (e *env) outputOf(requestID string, timeout time.Duration) protocol.Output {
	e.t.Helper()
	var found protocol.Output
	testkit.Eventually(e.t, "the output of "+requestID, timeout, func() bool {
		outs, _ := e.docs(e.keys.Output(e.cfg.WorkerID))
		for _, o := range outs {
			if o.RequestID == requestID {
				found = o
				return true
			}
		}
		return false
	})
	return found
}

// modelAsked waits until the stub model got a request whose turns hold
// marker: the agent is mid-task.
func modelAsked(t *testing.T, stub *stubmodel.Server, marker string) {
	t.Helper()
	testkit.Eventually(t, "a model request with "+marker, 60*time.Second, func() bool {
		for _, r := range stub.Requests() {
			if strings.Contains(r.Text(), marker) {
				return true
			}
		}
		return false
	})
}

// A running task is cancelled: exactly one output, cancelled with
// CANCELLED, long before the model's answer would have come; the agent's
// process group is gone (per task) or the process lives on (persistent);
// and the project's next task resumes the session, its model request
// carrying the cancelled task's prompt (Claude, Codex).
func TestCancelRunningTask(t *testing.T) {
	for _, tt := range []struct {
		name       string
		agent      protocol.AgentType
		persistent bool
	}{
		{"claude-per-task", protocol.AgentClaude, false},
		{"claude-persistent", protocol.AgentClaude, true},
		{"droid-per-task", protocol.AgentDroid, false},
		{"droid-persistent", protocol.AgentDroid, true},
		{"codex-per-task", protocol.AgentCodex, false},
		{"codex-persistent", protocol.AgentCodex, true},
	} {
		persistent := tt.persistent
		t.Run(tt.name, func(t *testing.T) {
			e, stub, environ := realAgentEnv(t, tt.agent)
			e.cfg.Persistent = persistent
			e.start(environ...)
			if persistent {
				// A first task starts the process and the session.
				stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
				if o := e.runTask(protocol.Task{RequestID: "c0", ProjectID: "gamma", Prompt: "warm up"}); o.Status != protocol.StatusComplete {
					t.Fatalf("warm-up: %+v", o)
				}
			}
			// The next answer takes 60 s: only a cancel ends the task sooner.
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: finalText, DelayMS: 60_000}},
				Fallback: &stubmodel.Step{Text: finalText}})
			input := e.keys.Input(e.cfg.WorkerID)
			e.send(input, protocol.Task{RequestID: "c1", ProjectID: "gamma", Prompt: "CANCEL-MARKER long job"})
			modelAsked(t, stub, "CANCEL-MARKER")
			sent := time.Now()
			e.sendCancel(input, "c1", "the user changed their mind")
			o1 := e.outputOf("c1", 30*time.Second)
			took := time.Since(sent)
			t.Logf("cancel → output: %v", took)
			if o1.Status != protocol.StatusCancelled || o1.Error == nil || o1.Error.Code != protocol.CodeCancelled ||
				!strings.Contains(o1.Error.Message, "while running: the user changed their mind") || o1.Error.Retryable {
				t.Fatalf("cancelled output: %+v (error %+v)", o1, o1.Error)
			}
			if took > 30*time.Second {
				t.Fatalf("the cancel took %v: the model's answer came first", took)
			}
			// The output does not wait for the interrupted agent's wind-down
			// (it saves its turn): a process per task is gone soon after,
			// the persistent one lives on.
			pids := e.taskPIDs()
			agentPID := pids[len(pids)-1]
			if persistent {
				time.Sleep(2 * time.Second)
				if syscall.Kill(agentPID, 0) != nil {
					t.Fatalf("the persistent agent %d died after the cancel", agentPID)
				}
			} else {
				testkit.Eventually(t, "the agent's exit", 10*time.Second, func() bool { return syscall.Kill(agentPID, 0) != nil })
			}
			run, _ := e.rc.HGetAll(context.Background(), e.keys.Run("c1")).Result()
			if run[protocol.RunFieldStatus] != string(protocol.RunFailed) || !strings.HasPrefix(run[protocol.RunFieldError], "CANCELLED: ") {
				t.Fatalf("run hash %v", run)
			}

			if tt.agent == protocol.AgentDroid && !persistent {
				// Droid's one-shot run resumes through its vendor's cloud,
				// unreachable here: its next task falls back to a new
				// session (see TestDroidResumeWithoutCloudFallsBack); the
				// cancel is what this case shows.
				return
			}
			// The session goes on.
			o2 := e.runTask(protocol.Task{RequestID: "c2", ProjectID: "gamma", Prompt: "next job"})
			if o2.Status != protocol.StatusComplete || decision(o2) != "resume/continued" || o2.SessionID != o1.SessionID {
				t.Fatalf("next task: %s %+v (cancelled one's session %s)", decision(o2), o2, o1.SessionID)
			}
			reqs := stub.Requests()
			if !strings.Contains(reqs[len(reqs)-1].Text(), "CANCEL-MARKER") {
				t.Fatal("the next task's model request lacks the cancelled task's turn")
			}
			if persistent {
				if pids := e.taskPIDs(); pids[len(pids)-1] != agentPID {
					t.Fatalf("task pids %v: the persistent process was replaced after the cancel", pids)
				}
			}
			// Exactly one output per task; the cancel entry was read and
			// acknowledged in its turn.
			outs, _ := e.docs(e.keys.Output(e.cfg.WorkerID))
			seen := map[string]int{}
			for _, o := range outs {
				seen[o.RequestID]++
			}
			if seen["c1"] != 1 || seen["c2"] != 1 {
				t.Fatalf("outputs per request %v", seen)
			}
			testkit.Eventually(t, "every input entry acknowledged", 5*time.Second, func() bool {
				p, err := e.rc.XPending(context.Background(), input, protocol.GroupFor(protocol.KindLongLived)).Result()
				return err == nil && p.Count == 0
			})
			cancelledEvents := 0
			for _, l := range e.lifecycleEvents() {
				if l.Event == protocol.EventTaskCancelled && l.RequestID == "c1" {
					cancelledEvents++
				}
			}
			if cancelledEvents != 1 {
				t.Fatalf("%d task_cancelled events for c1, want 1", cancelledEvents)
			}
		})
	}
}

// A queued task is cancelled: behind a running task, and before the
// worker ever started (a paused worker's input). Neither runs: no
// task_started, no model request with its prompt; each gets one
// cancelled output.
func TestCancelQueuedTask(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	input := e.keys.Input(e.cfg.WorkerID)
	// Before the worker starts: a task, then its cancel.
	e.send(input, protocol.Task{RequestID: "q0", Prompt: "NEVER-RUN-0"})
	e.sendCancel(input, "q0", "")
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: finalText, DelayMS: 60_000}},
		Fallback: &stubmodel.Step{Text: finalText}})
	e.start(environ...)
	if o := e.outputOf("q0", 30*time.Second); o.Status != protocol.StatusCancelled || o.Error.Message != "cancelled before it ran" {
		t.Fatalf("q0: %+v (error %+v)", o, o.Error)
	}

	e.send(input, protocol.Task{RequestID: "q1", Prompt: "LONG-RUNNING"})
	modelAsked(t, stub, "LONG-RUNNING")
	e.send(input, protocol.Task{RequestID: "q2", Prompt: "NEVER-RUN-2"})
	e.sendCancel(input, "q2", "not needed")
	e.sendCancel(input, "nobody", "") // names no task: nothing to answer
	e.sendCancel(input, "q1", "")
	if o := e.outputOf("q1", 30*time.Second); o.Status != protocol.StatusCancelled {
		t.Fatalf("q1: %+v", o)
	}
	if o := e.outputOf("q2", 30*time.Second); o.Status != protocol.StatusCancelled || o.Error.Message != "cancelled before it ran: not needed" {
		t.Fatalf("q2: %+v (error %+v)", o, o.Error)
	}
	e.pubFlushed()
	for _, l := range e.lifecycleEvents() {
		if l.Event == protocol.EventTaskStarted && (l.RequestID == "q0" || l.RequestID == "q2") {
			t.Fatalf("cancelled queued task %s started its agent", l.RequestID)
		}
	}
	for _, r := range stub.Requests() {
		if strings.Contains(r.Text(), "NEVER-RUN") {
			t.Fatal("the model saw a task cancelled while queued")
		}
	}
	outs, _ := e.docs(e.keys.Output(e.cfg.WorkerID))
	if len(outs) != 3 {
		t.Fatalf("%d outputs, want 3 (q0, q1, q2; none for the cancel of an unknown task)", len(outs))
	}
}

// A cancel is answered once the agent is interrupted, not once it is done
// stopping: the agent (the fake's slow-interrupt, an interrupted Claude
// under a CPU limit) has not finished saving its turn when the cancelled
// output is there. The next task's agent starts only after that agent
// ended (no two runs in a session at once), in the same session; and the
// usage the interrupted agent reported while winding down (its result's,
// with its cost) is in the project's counters beside the output's.
func TestCancelAnswersBeforeTheAgentWoundDown(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	input := e.keys.Input(e.cfg.WorkerID)
	e.send(input, protocol.Task{RequestID: "w1", ProjectID: "delta", Prompt: "fake:slow-interrupt"})
	testkit.Eventually(t, "the agent's first turn", 10*time.Second, func() bool {
		return len(e.taskPIDs()) == 1 && e.rc.HGet(context.Background(), e.keys.Status(e.cfg.WorkerID), protocol.StatusFieldRequestID).Val() == "w1"
	})
	testkit.Eventually(t, "the agent's first turn printed", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(e.cfg.Workspace, "first-turn.txt"))
		return err == nil
	})
	time.Sleep(300 * time.Millisecond) // its init line and first turn read off the pipe
	e.sendCancel(input, "w1", "changed plans")
	o1 := e.outputOf("w1", 10*time.Second)
	woundDown := filepath.Join(e.cfg.Workspace, "wound-down.txt")
	if _, err := os.Stat(woundDown); err == nil {
		t.Fatal("the cancelled output waited for the interrupted agent to wind down")
	}
	if o1.Status != protocol.StatusCancelled || o1.SessionID == "" || o1.Usage.Input != 2001 {
		t.Fatalf("cancelled output %+v: want the session and the usage of the turn before the cancel", o1)
	}

	e.send(input, protocol.Task{RequestID: "w2", ProjectID: "delta", Prompt: "fake:stamp"})
	o2 := e.outputOf("w2", 10*time.Second)
	b, err := os.ReadFile(woundDown)
	if err != nil {
		t.Fatalf("the interrupted agent never finished saving its turn: %v", err)
	}
	doneNS, _ := strconv.ParseInt(string(b), 10, 64)
	var stamp struct {
		StartNS int64 `json:"start_ns"`
	}
	if err := json.Unmarshal(o2.Result, &stamp); err != nil || stamp.StartNS <= doneNS {
		t.Fatalf("the next task's agent started at %d, the interrupted one wound down at %d (%v)", stamp.StartNS, doneNS, err)
	}
	if o2.Status != protocol.StatusComplete || decision(o2) != "resume/continued" || o2.SessionID != o1.SessionID {
		t.Fatalf("next task: %s %+v, want the cancelled task's session %s resumed", decision(o2), o2, o1.SessionID)
	}
	// The counters: the interrupted result's usage (4000 input, $0.03425)
	// for w1, whose output said 2001 at no known cost, and w2's.
	testkit.Eventually(t, "the wind-down's usage counted", 5*time.Second, func() bool {
		got, _ := e.rc.HGetAll(context.Background(), e.keys.UsageProject("delta")).Result()
		cost, _ := strconv.ParseFloat(got["cost_usd"], 64)
		return got["input"] == strconv.FormatInt(4000+o2.Usage.Input, 10) && got["tasks"] == "2" &&
			cost > 0.03425+o2.CostUSD-1e-9 && cost < 0.03425+o2.CostUSD+1e-9
	})
}

// sleepSeconds is how long the command of cancelsDuringACommand sleeps: a
// figure no other process on the machine sleeps, so that pgrep finds this
// one.
const sleepSeconds = "29.917"

// cancelEndsIt bounds a cancel's output in the tests whose command runs
// 30 s: an output this soon came from the cancel, not from the command's
// end. How soon it comes is BenchmarkCancel's figure (worker-wrapper), measured,
// not asserted.
const cancelEndsIt = 10 * time.Second

// cancelsDuringACommand: a cancel of a task of agentType's persistent
// process while its command runs (a 30 s sleep) ends the turn and the
// command (OpenCode's session/cancel, Codex's turn/interrupt): the output
// comes long before the command would end, CANCELLED. The process stays
// and serves the session's next task, whose model request carries the
// cancelled turn. It returns the worker's env.
func cancelsDuringACommand(t *testing.T, agentType protocol.AgentType) *env {
	e, stub, environ := realAgentEnv(t, agentType)
	allowed, err := protocol.ParseAllowedCommandsEnv("sleep.*")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.AllowedCommands, e.cfg.Persistent = allowed, true
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{Text: finalText},
		{ToolUse: shellTool(agentType, "sleep "+sleepSeconds)},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	o0 := e.runTask(protocol.Task{RequestID: "k0", ProjectID: "p", Prompt: "warm up"})
	if o0.Status != protocol.StatusComplete {
		t.Fatalf("warm-up: %+v (error %+v)", o0, o0.Error)
	}
	sleeping := func() bool { return exec.Command("pgrep", "-f", "-x", "sleep "+sleepSeconds).Run() == nil }
	input := e.keys.Input(e.cfg.WorkerID)
	e.send(input, protocol.Task{RequestID: "k1", ProjectID: "p", Prompt: "CANCEL-MARKER sleep a while"})
	testkit.Eventually(t, "the sleep running", 60*time.Second, sleeping)
	start := time.Now()
	e.sendCancel(input, "k1", "not needed")
	o1 := e.outputOf("k1", 30*time.Second)
	took := time.Since(start)
	t.Logf("cancel → output: %v", took)
	if o1.Status != protocol.StatusCancelled || o1.Error == nil || o1.Error.Code != protocol.CodeCancelled || took > cancelEndsIt {
		t.Fatalf("cancel: %+v (error %+v) after %v", o1, o1.Error, took)
	}
	testkit.Eventually(t, "the cancelled turn's command gone", 5*time.Second, func() bool { return !sleeping() })
	o2 := e.runTask(protocol.Task{RequestID: "k2", ProjectID: "p", Prompt: "after"})
	if pids := e.taskPIDs(); o2.Status != protocol.StatusComplete || o2.SessionID != o0.SessionID || decision(o2) != "resume/continued" || pids[len(pids)-1] != pids[0] {
		t.Fatalf("after the cancel: %s %+v (error %+v), pids %v", decision(o2), o2, o2.Error, pids)
	}
	reqs := stub.Requests()
	if !strings.Contains(reqs[len(reqs)-1].Text(), "CANCEL-MARKER") {
		t.Fatal("the next task's model request lacks the cancelled turn")
	}
	return e
}
