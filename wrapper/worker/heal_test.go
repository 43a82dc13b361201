package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// refusals counts the requests the stub refused for their key.
func refusals(stub *stubmodel.Server) int {
	n := 0
	for _, r := range stub.OtherRequests() {
		if strings.HasPrefix(r, "401 ") {
			n++
		}
	}
	return n
}

// A model API that refuses the key (a 401 storm) fails the task with
// AUTH_FAILED, not retryable, at the first refusal: the agent is stopped,
// not left to retry for minutes.
func TestAuthFailedStopsTheAgentAtTheFirstRefusal(t *testing.T) {
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		stub.SetAPIKey("sk-another-key-the-worker-does-not-have")
		e.cfg.TaskTimeout = 60 * time.Second
		e.start(environ...)
		start := time.Now()
		o := e.runTask(protocol.Task{RequestID: "auth-1", Prompt: "hello"})
		t.Logf("%s: output %v after the task was sent, %d refused model calls", agentType, time.Since(start), refusals(stub))
		if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeAuthFailed || o.Error.Retryable {
			t.Fatalf("output %+v (error %+v)", o, o.Error)
		}
		if n := refusals(stub); n == 0 || n > 3 {
			t.Fatalf("%d refused model calls: want the agent stopped at the first", n)
		}
	})
}

// An agent that prints nothing for STALL_TIMEOUT (here: the model holds
// its answer a minute) is stopped: AGENT_STALLED, retryable, long before
// the task's timeout; a persistent process is replaced by the next task.
func TestStalledAgent(t *testing.T) {
	t.Parallel() // it waits out stall timeouts, the CPU idle
	for _, persistent := range []bool{false, true} {
		t.Run(map[bool]string{false: "per-task", true: "persistent"}[persistent], func(t *testing.T) {
			t.Parallel()
			e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
			e.cfg.Persistent = persistent
			// Long enough for a real claude to start and print its first
			// line on a busy machine (the second task's start is timed
			// by it too), far shorter than the model's 60 s silence.
			e.cfg.StallTimeout = 12 * time.Second
			e.cfg.TaskTimeout = 120 * time.Second
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: finalText, DelayMS: 60_000}},
				Fallback: &stubmodel.Step{Text: finalText}})
			e.start(environ...)
			start := time.Now()
			o := e.runTask(protocol.Task{RequestID: "stall-1", ProjectID: "p", Prompt: "hello"})
			t.Logf("output after %v", time.Since(start))
			if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeAgentStalled || !o.Error.Retryable {
				t.Fatalf("output %+v (error %+v)", o, o.Error)
			}
			if time.Since(start) > 60*time.Second {
				t.Fatal("the task ended with the model's answer, not with the stall")
			}
			if o2 := e.runTask(protocol.Task{RequestID: "stall-2", ProjectID: "p", Prompt: "again"}); o2.Status != protocol.StatusComplete {
				t.Fatalf("the next task: %+v (error %+v)", o2, o2.Error)
			}
		})
	}
}

// The persistent process is recycled after AGENT_RECYCLE_TASKS tasks, or
// once its RSS passed AGENT_RECYCLE_RSS; the next process resumes the
// project's session.
func TestPersistentAgentRecycled(t *testing.T) {
	for _, tt := range []struct {
		name          string
		tasks         int
		rss           int64
		samePIDBefore int // tasks served by the first process
	}{
		{"after-2-tasks", 2, 0, 2},
		{"rss-over-threshold", 0, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
			e.cfg.Persistent, e.cfg.RecycleTasks, e.cfg.RecycleRSS = true, tt.tasks, tt.rss
			stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
			e.start(environ...)
			var outs []protocol.Output
			for i, prompt := range []string{"RECYCLE-MARKER first", "second", "third"} {
				o := e.runTask(protocol.Task{RequestID: "r" + string(rune('1'+i)), ProjectID: "rec", Prompt: prompt})
				if o.Status != protocol.StatusComplete || (i > 0 && (decision(o) != "resume/continued" || o.SessionID != outs[0].SessionID)) {
					t.Fatalf("task %d: %s %+v", i+1, decision(o), o)
				}
				outs = append(outs, o)
			}
			pids := e.taskPIDs()
			for i := 1; i < len(pids); i++ {
				if same := pids[i] == pids[0]; same != (i < tt.samePIDBefore) {
					t.Fatalf("task pids %v: want the first %d on one process, then a new one", pids, tt.samePIDBefore)
				}
			}
			reqs := stub.Requests()
			if !strings.Contains(reqs[len(reqs)-1].Text(), "RECYCLE-MARKER") {
				t.Fatal("the recycled process did not resume the session")
			}
		})
	}
}

// A 429 with a reset time within the task's timeout parks the model call
// (a progress warning says until when) and the task then completes; one
// whose reset is past the timeout fails RATE_LIMITED at once.
func TestRateLimitParksThenCompletes(t *testing.T) {
	t.Parallel() // its workers wait out a retry-after, the CPU idle
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		e.cfg.TaskTimeout = 60 * time.Second
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{Error: &stubmodel.HTTPError{Status: 429, Header: map[string]string{"retry-after": "2"}}},
			{Text: finalText},
			{Error: &stubmodel.HTTPError{Status: 429, Header: map[string]string{"retry-after": "3600"}}, Repeat: 20},
		}, Fallback: &stubmodel.Step{Text: finalText}})
		e.start(environ...)
		o := e.runTask(protocol.Task{RequestID: "rl-1", Prompt: "hello"})
		if o.Status != protocol.StatusComplete {
			t.Fatalf("parked task: %+v (error %+v)", o, o.Error)
		}
		_, progress := e.docs(e.keys.Output(e.cfg.WorkerID))
		parked := false
		for _, p := range progress {
			parked = parked || (p.RequestID == "rl-1" && p.Level == protocol.LevelWarning && strings.Contains(p.Step, "rate limited (HTTP 429, attempt 1): the task is parked until"))
		}
		if !parked {
			t.Fatalf("no progress warning said the task was parked: %+v", progress)
		}
		start := time.Now()
		o = e.runTask(protocol.Task{RequestID: "rl-2", Prompt: "hello again"})
		t.Logf("%s: rate limited for an hour: output after %v", agentType, time.Since(start))
		if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeRateLimited || !o.Error.Retryable {
			t.Fatalf("rate limited past the timeout: %+v (error %+v)", o, o.Error)
		}
	})
}
