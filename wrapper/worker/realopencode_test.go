package worker

import (
	"os"
	"path/filepath"
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
// see cancelsDuringACommand.
func TestRealOpenCodeCancel(t *testing.T) {
	cancelsDuringACommand(t, protocol.AgentOpenCode)
}

// An OpenCode task's max_budget_usd is guarded by the wrapper from what
// its proxy meters: the call that passes it stops the task,
// BUDGET_EXCEEDED, in the middle of a 30 s command.
func TestRealOpenCodeMaxBudget(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentOpenCode)
	allowed, err := protocol.ParseAllowedCommandsEnv("worker.progress,sleep.*")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.AllowedCommands = allowed
	e.start(environ...)
	big := stubmodel.Usage{InputTokens: 2_000_000, OutputTokens: 80}
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(protocol.AgentOpenCode, `worker-wrapper progress --step "one"`)},
		{ToolUse: shellTool(protocol.AgentOpenCode, "sleep 30"), Usage: &big},
		{ToolUse: shellTool(protocol.AgentOpenCode, `worker-wrapper progress --step "never"`)},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	start := time.Now()
	o := e.runTask(protocol.Task{RequestID: "b1", ProjectID: "p", Prompt: "spend", MaxBudgetUSD: 1})
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeBudgetExceeded || !o.CostEstimated || o.CostUSD < 1 {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	if took := time.Since(start); took > 25*time.Second {
		t.Fatalf("the task took %v: the budget did not stop the 30 s command", took)
	}
	if n := len(stub.Requests()); n != 2 {
		t.Fatalf("%d model calls reached the stub, want 2", n)
	}
}

// With AGENT_APPROVAL, a command ALLOWED_COMMANDS does not allow is a
// permission_request to the task's owner (OpenCode asks over ACP, in a
// process of its own per task): allowed, it runs.
func TestRealOpenCodeApproval(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentOpenCode)
	e.cfg.Approval, e.cfg.ApprovalTimeout = true, 60*time.Second
	e.start(environ...)
	marker := filepath.Join(e.cfg.Workspace, "approved") // in the workspace: OpenCode asks again for a path outside it
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(protocol.AgentOpenCode, "touch "+marker)},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	input := e.keys.Input(e.cfg.WorkerID)
	e.send(input, protocol.Task{RequestID: "ap", Prompt: "touch it"})
	var p protocol.PermissionRequest
	testkit.Eventually(t, "permission request", 60*time.Second, func() bool {
		ps := e.permissionRequests()
		if len(ps) > 0 {
			p = ps[0]
		}
		return len(ps) > 0
	})
	if p.Tool != "Bash" || !strings.Contains(string(p.Input), "touch "+marker) {
		t.Fatalf("permission request %+v", p)
	}
	e.sendDoc(input)(protocol.NewPermissionReply("ap", p.PermissionID, true, "").Encode())
	if o := e.outputOf("ap", 60*time.Second); o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the approved command did not run: %v", err)
	}
}
