package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// retrying returns the "retrying" warnings of a run on out.
func (e *env) retrying(out, requestID string) []protocol.Progress {
	_, prog := e.docs(out)
	var r []protocol.Progress
	for _, p := range prog {
		if p.RequestID == requestID && strings.HasPrefix(p.Step, "retrying, attempt ") {
			r = append(r, p)
		}
	}
	return r
}

// startedAt returns the times of a run's task_started events, one per
// attempt, and their attempt numbers.
func (e *env) startedAt(requestID string) (at []time.Time, attempts []float64) {
	for _, l := range e.lifecycleEvents() {
		if l.Event == protocol.EventTaskStarted && l.RequestID == requestID {
			at = append(at, l.Timestamp)
			n, _ := l.Detail["attempt"].(float64)
			attempts = append(attempts, n)
		}
	}
	return at, attempts
}

func (e *env) runHash(requestID string) map[string]string {
	h, err := e.rc.HGetAll(context.Background(), e.keys.Run(requestID)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// A task that asks for retries and keeps failing with a retryable code
// runs its attempts, each after its backoff, and has one output: the last
// attempt's, failed, with attempt 3. The same task without retry fails
// once; a non-retryable failure is never retried.
func TestRetryBackoffAndLimits(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	out := e.keys.Output(e.cfg.WorkerID)

	backoff := []int{300, 600}
	o := e.runTask(protocol.Task{RequestID: "retried", Prompt: "fake:is-error",
		Retry: &protocol.RetryPolicy{Attempts: 3, BackoffMS: backoff}})
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeAgentError || o.Attempt != 3 {
		t.Fatalf("retried task: %+v (error %+v)", o, o.Error)
	}
	warn := e.retrying(out, "retried")
	if len(warn) != 2 || warn[0].Step != "retrying, attempt 2 of 3: AGENT_ERROR" || warn[1].Step != "retrying, attempt 3 of 3: AGENT_ERROR" ||
		warn[0].Level != protocol.LevelWarning {
		t.Fatalf("retry warnings: %+v", warn)
	}
	at, attempts := e.startedAt("retried")
	if len(at) != 3 || attempts[0] != 1 || attempts[1] != 2 || attempts[2] != 3 {
		t.Fatalf("task_started events: %v attempts %v", at, attempts)
	}
	for i, ms := range backoff {
		// The next attempt starts no sooner than its backoff after the
		// warning that announced it.
		if gap := at[i+1].Sub(warn[i].Timestamp); gap < time.Duration(ms)*time.Millisecond {
			t.Errorf("attempt %d started %v after its warning, want at least %d ms", i+2, gap, ms)
		}
	}
	if run := e.runHash("retried"); run["attempt"] != "3" || run["status"] != "failed" || !strings.HasPrefix(run["error"], "AGENT_ERROR: ") {
		t.Errorf("run hash %v", run)
	}

	// Without retry: one attempt.
	retried := o
	o = e.runTask(protocol.Task{RequestID: "once", Prompt: "fake:is-error"})
	if retried.Usage.Input != 3*o.Usage.Input || o.Usage.Input == 0 {
		t.Errorf("usage %+v: want the sum of three attempts of %+v", retried.Usage, o.Usage)
	}
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeAgentError || o.Attempt != 1 {
		t.Fatalf("task without retry: %+v (error %+v)", o, o.Error)
	}
	if w := e.retrying(out, "once"); len(w) != 0 {
		t.Fatalf("a task that did not ask was retried: %+v", w)
	}

	// A non-retryable failure (the agent's own "failed") is not retried.
	o = e.runTask(protocol.Task{RequestID: "task-failed", Prompt: "fake:failed", Retry: &protocol.RetryPolicy{}})
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeTaskFailed || o.Attempt != 1 {
		t.Fatalf("non-retryable: %+v (error %+v)", o, o.Error)
	}
	if w := e.retrying(out, "task-failed"); len(w) != 0 {
		t.Fatalf("a non-retryable failure was retried: %+v", w)
	}
	outs, _ := e.docs(out)
	if len(outs) != 3 {
		t.Fatalf("%d outputs for 3 tasks", len(outs))
	}
}

// A cancel that comes during the backoff ends the task cancelled; no
// further attempt starts.
func TestRetryCancelledDuringBackoff(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
	e.send(in, protocol.Task{RequestID: "c1", Prompt: "fake:is-error", Retry: &protocol.RetryPolicy{BackoffMS: []int{60_000}}})
	deadline := time.Now().Add(15 * time.Second)
	for len(e.retrying(out, "c1")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no retry warning")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.sendCancel(in, "c1", "enough")
	o := e.outputOf("c1", 10*time.Second)
	if o.Status != protocol.StatusCancelled || o.Attempt != 1 {
		t.Fatalf("cancelled during the backoff: %+v (error %+v)", o, o.Error)
	}
	if at, _ := e.startedAt("c1"); len(at) != 1 {
		t.Fatalf("%d attempts started, want 1", len(at))
	}
}

// The real agents against the stub model: the model API stays overloaded
// (529) past the task's timeout on the first attempt, so the attempt fails
// RATE_LIMITED; a task that asked for retries succeeds on the second
// attempt, in the first attempt's session, with one output. Per-task and
// persistent agent processes alike.
func TestRetryTransientAPIErrorRealAgents(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		name := "per-task"
		if persistent {
			name = "persistent"
		}
		t.Run(name, func(t *testing.T) {
			eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
				e.cfg.Persistent = persistent
				e.cfg.TaskTimeout = 60 * time.Second
				overloaded := stubmodel.Step{Error: &stubmodel.HTTPError{Status: 529, Header: map[string]string{"retry-after": "3600"}}}
				stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{overloaded}, Fallback: &stubmodel.Step{Text: finalText}})
				e.start(environ...)
				out := e.keys.Output(e.cfg.WorkerID)
				o := e.runTask(protocol.Task{RequestID: "transient", Prompt: "hello", Trigger: "cron",
					Retry: &protocol.RetryPolicy{BackoffMS: []int{200}}})
				if o.Status != protocol.StatusComplete || o.Attempt != 2 {
					t.Fatalf("retried task: %+v (error %+v)", o, o.Error)
				}
				warn := e.retrying(out, "transient")
				if len(warn) != 1 || warn[0].Step != "retrying, attempt 2 of 4: RATE_LIMITED" {
					t.Fatalf("retry warnings: %+v", warn)
				}
				if agentType == protocol.AgentClaude && (o.Session == nil || o.Session.Reason != protocol.SessionReasonRetry) {
					t.Errorf("the retry did not continue the first attempt's session: %+v", o.Session)
				}
				run := e.runHash("transient")
				if run["attempt"] != "2" || run["status"] != "completed" || run["agent_slug"] != string(agentType) || run["trigger"] != "cron" {
					t.Errorf("run hash %v", run)
				}
				if outs, _ := e.docs(out); len(outs) != 1 {
					t.Fatalf("%d outputs, want one", len(outs))
				}

				// The same without retry fails once.
				stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{overloaded}, Fallback: &stubmodel.Step{Text: finalText}})
				o = e.runTask(protocol.Task{RequestID: "no-retry", Prompt: "hello"})
				if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeRateLimited || o.Attempt != 1 {
					t.Fatalf("task without retry: %+v (error %+v)", o, o.Error)
				}
				if w := e.retrying(out, "no-retry"); len(w) != 0 {
					t.Fatalf("retried without asking: %+v", w)
				}
			})
		})
	}
}

// The run hash carries the design's fields: agent_slug, trigger,
// steps_total (the agent's --total), steps_completed, current_step.
func TestRunRecordFields(t *testing.T) {
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{ToolUse: shellTool(agentType, `worker-wrapper progress --step "Running tests" --total 4`)},
			{Text: finalText},
		}})
		e.start(environ...)
		o := e.runTask(protocol.Task{RequestID: "fields", Prompt: "Run the tests.", Trigger: "webhook:push"})
		if o.Status != protocol.StatusComplete {
			t.Fatalf("output %+v (error %+v)", o, o.Error)
		}
		run, err := protocol.RunFromHash(e.runHash("fields"))
		if err != nil {
			t.Fatal(err)
		}
		if run.AgentSlug != string(agentType) || run.Trigger != "webhook:push" || run.StepsTotal != 4 || run.StepsCompleted != 1 ||
			run.CurrentStep != "Running tests" || run.State != protocol.RunCompleted || run.Error != "" {
			t.Errorf("run %+v", run)
		}
		_, prog := e.docs(e.keys.Output(e.cfg.WorkerID))
		if len(prog) != 1 || prog[0].StepsTotal != 4 || prog[0].StepsCompleted != 1 {
			t.Errorf("progress %+v", prog)
		}
	})
}
