package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// These tests run the real OpenCode (`opencode acp`, installed by `make
// setup`) through the wrapper's ACP adapter, against the stub model's
// Messages API behind the wrapper's proxy.

// An OpenCode task: its progress call through its bash tool and its tool
// call as progress events, its stop output, its usage metered by the
// proxy; a command ALLOWED_COMMANDS does not allow is refused (OpenCode
// asks, the wrapper rejects) and reported; the project's next task
// continues the session (session/load), the model request carrying the
// first turn.
func TestRealOpenCodeTaskAndSession(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentOpenCode)
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(protocol.AgentOpenCode, `worker-wrapper progress --step "Running tests" --pct 50`)},
		{ToolUse: shellTool(protocol.AgentOpenCode, "rm -rf /tmp/agentvisor-nothing")},
		{Text: "All done.\n{\"status\": \"complete\", \"result\": {\"pr\": 42}}"},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	o1 := e.runTask(protocol.Task{RequestID: "oc1", ProjectID: "p", Prompt: "FIRST-MARKER fix the build"})
	if o1.Status != protocol.StatusComplete || string(o1.Result) != `{"pr":42}` || o1.SessionID == "" || decision(o1) != "new/no_session" {
		t.Fatalf("first task: %s %+v (error %+v)", decision(o1), o1, o1.Error)
	}
	if want := 3 * stubmodel.DefaultUsage.InputTokens; o1.Usage.Input != want || !o1.CostEstimated || o1.CostUSD <= 0 {
		t.Errorf("usage %+v, cost $%g (estimated %v): want three metered calls", o1.Usage, o1.CostUSD, o1.CostEstimated)
	}
	_, prog := e.docs(e.keys.Output(e.cfg.WorkerID))
	var steps []string
	refused := false
	for _, p := range prog {
		steps = append(steps, p.Step)
		refused = refused || (p.Refused != nil && p.Refused.Command == "rm -rf /tmp/agentvisor-nothing")
	}
	joined := strings.Join(steps, "|")
	if !strings.Contains(joined, "Running tests") || !strings.Contains(joined, "tool: ") || !refused {
		t.Errorf("progress %q (refusal reported: %v)", joined, refused)
	}
	reqs := stub.Requests()
	if !strings.Contains(reqs[0].System, "worker-wrapper progress") {
		t.Errorf("the system prompt lacks the wrapper's section")
	}

	o2 := e.runTask(protocol.Task{RequestID: "oc2", ProjectID: "p", Prompt: "second"})
	if o2.Status != protocol.StatusComplete || o2.SessionID != o1.SessionID || decision(o2) != "resume/continued" {
		t.Fatalf("second task: %s %+v (error %+v), first session %s", decision(o2), o2, o2.Error, o1.SessionID)
	}
	reqs = stub.Requests()
	if last := reqs[len(reqs)-1].Text(); !strings.Contains(last, "FIRST-MARKER") || !strings.Contains(last, "second") {
		t.Fatalf("the continued session's request lacks the first turn:\n%s", last)
	}
}

// A cancel of a running OpenCode task (a 30 s command) is session/cancel:
// the output within 2 s, CANCELLED; the persistent process stays and
// serves the next task of the session.
func TestRealOpenCodeCancel(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentOpenCode)
	allowed, err := protocol.ParseAllowedCommandsEnv("worker.progress,sleep.*")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.AllowedCommands, e.cfg.Persistent = allowed, true
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{Text: finalText},
		{ToolUse: shellTool(protocol.AgentOpenCode, "sleep 30")},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	o0 := e.runTask(protocol.Task{RequestID: "k0", ProjectID: "p", Prompt: "warm up"})
	if o0.Status != protocol.StatusComplete {
		t.Fatalf("warm-up: %+v (error %+v)", o0, o0.Error)
	}
	input := e.keys.Input(e.cfg.WorkerID)
	e.send(input, protocol.Task{RequestID: "k1", ProjectID: "p", Prompt: "sleep a while"})
	testkit.Eventually(t, "the sleep running", 60*time.Second, func() bool {
		_, prog := e.docs(e.keys.Output(e.cfg.WorkerID))
		for _, p := range prog {
			if p.RequestID == "k1" && strings.HasPrefix(p.Step, "tool: sleep") {
				return true
			}
		}
		return false
	})
	start := time.Now()
	e.sendCancel(input, "k1", "not needed")
	o1 := e.outputOf("k1", 30*time.Second)
	if took := time.Since(start); o1.Status != protocol.StatusCancelled || took > 2*time.Second {
		t.Fatalf("cancel: %+v (error %+v) after %v", o1, o1.Error, took)
	}
	o2 := e.runTask(protocol.Task{RequestID: "k2", ProjectID: "p", Prompt: "after"})
	if pids := e.taskPIDs(); o2.Status != protocol.StatusComplete || o2.SessionID != o0.SessionID || pids[len(pids)-1] != pids[0] {
		t.Fatalf("after the cancel: %+v (error %+v), pids %v", o2, o2.Error, pids)
	}
}
