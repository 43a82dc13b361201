package worker

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// These tests run the real Qwen Code (`qwen --acp`, installed by `make
// setup` with its own Node.js) through the wrapper's ACP adapter, against
// the stub model's Chat Completions behind the wrapper's proxy.

// qwenLongCommand runs for 30 s. Qwen Code refuses a foreground `sleep`
// of two seconds or more that gives no reason, so the tests wrap it.
const qwenLongCommand = "timeout 40 sleep 30"

// A Qwen Code task: its progress call through its shell tool and its tool
// call as progress events, its stop output, its usage metered by the
// proxy and priced by MODEL_PRICES; a command ALLOWED_COMMANDS does not
// allow is refused by the guard hook and reported, and the turn goes on;
// the project's next task continues the session (session/load in a new
// process), the model request carrying the first turn.
func TestRealQwenTaskAndSession(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentQwen)
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(protocol.AgentQwen, `worker-wrapper progress --step "Running tests" --pct 50`)},
		{ToolUse: shellTool(protocol.AgentQwen, "rm -rf /tmp/agentvisor-nothing")},
		{Text: "All done.\n{\"status\": \"complete\", \"result\": {\"pr\": 42}}"},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	o1 := e.runTask(protocol.Task{RequestID: "q1", ProjectID: "p", Prompt: "FIRST-MARKER fix the build"})
	if o1.Status != protocol.StatusComplete || string(o1.Result) != `{"pr":42}` || o1.SessionID == "" || decision(o1) != "new/no_session" {
		t.Fatalf("first task: %s %+v (error %+v)", decision(o1), o1, o1.Error)
	}
	if want := 3 * (2100*1 + 80*10 + 9000*0.1) / 1e6; o1.Usage.Input != 3*2100 || !o1.CostEstimated || !near(o1.CostUSD, want) {
		t.Errorf("usage %+v, cost $%g (estimated %v): want three metered calls at $%g", o1.Usage, o1.CostUSD, o1.CostEstimated, want)
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
	if !strings.Contains(reqs[0].System, "worker-wrapper progress") || reqs[0].Path != "/v1/chat/completions" {
		t.Errorf("the first request (%s) lacks the wrapper's section in its system prompt", reqs[0].Path)
	}
	if !strings.Contains(reqs[2].Text(), "refused by agentvisor") {
		t.Errorf("the model was not told of the refusal:\n%s", reqs[2].Text())
	}

	o2 := e.runTask(protocol.Task{RequestID: "q2", ProjectID: "p", Prompt: "second"})
	if o2.Status != protocol.StatusComplete || o2.SessionID != o1.SessionID || decision(o2) != "resume/continued" {
		t.Fatalf("second task: %s %+v (error %+v), first session %s", decision(o2), o2, o2.Error, o1.SessionID)
	}
	reqs = stub.Requests()
	if last := reqs[len(reqs)-1].Text(); !strings.Contains(last, "FIRST-MARKER") || !strings.Contains(last, "second") {
		t.Fatalf("the continued session's request lacks the first turn:\n%s", last)
	}
	if o2.Usage.Input != 2100 {
		t.Errorf("the second task's usage %+v: want its one call's", o2.Usage)
	}
}

// A cancel of a running Qwen Code task (a 30 s command) is
// session/cancel: the output within 2 s, CANCELLED; the persistent
// process stays and serves the next task of the session.
func TestRealQwenCancel(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentQwen)
	allowed, err := protocol.ParseAllowedCommandsEnv("worker.progress,timeout.*")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.AllowedCommands, e.cfg.Persistent = allowed, true
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{Text: finalText},
		{ToolUse: shellTool(protocol.AgentQwen, qwenLongCommand)},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	o0 := e.runTask(protocol.Task{RequestID: "k0", ProjectID: "p", Prompt: "warm up"})
	if o0.Status != protocol.StatusComplete {
		t.Fatalf("warm-up: %+v (error %+v)", o0, o0.Error)
	}
	input := e.keys.Input(e.cfg.WorkerID)
	e.send(input, protocol.Task{RequestID: "k1", ProjectID: "p", Prompt: "sleep a while"})
	testkit.Eventually(t, "the command running", 60*time.Second, func() bool {
		_, prog := e.docs(e.keys.Output(e.cfg.WorkerID))
		for _, p := range prog {
			if p.RequestID == "k1" && strings.Contains(p.Step, qwenLongCommand) {
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
	t.Logf("cancelled: output %v after the cancel", time.Since(start))
	o2 := e.runTask(protocol.Task{RequestID: "k2", ProjectID: "p", Prompt: "after"})
	if pids := e.taskPIDs(); o2.Status != protocol.StatusComplete || o2.SessionID != o0.SessionID || pids[len(pids)-1] != pids[0] {
		t.Fatalf("after the cancel: %+v (error %+v), pids %v", o2, o2.Error, pids)
	}
}

// A Qwen Code task's max_budget_usd is guarded by the wrapper from what
// its proxy meters: the call that passes it stops the task,
// BUDGET_EXCEEDED, in the middle of a 30 s command, and no further model
// call reaches the upstream.
func TestRealQwenMaxBudget(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentQwen)
	allowed, err := protocol.ParseAllowedCommandsEnv("worker.progress,timeout.*")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.AllowedCommands = allowed
	e.start(environ...)
	big := stubmodel.Usage{InputTokens: 2_000_000, OutputTokens: 80}
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(protocol.AgentQwen, `worker-wrapper progress --step "one"`)},
		{ToolUse: shellTool(protocol.AgentQwen, qwenLongCommand), Usage: &big},
		{ToolUse: shellTool(protocol.AgentQwen, `worker-wrapper progress --step "never"`)},
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
	pids := e.taskPIDs()
	if syscall.Kill(pids[len(pids)-1], 0) == nil {
		t.Fatal("the Qwen Code process lives on after the budget stop")
	}
}

// With AGENT_APPROVAL, Qwen Code asks (session/request_permission) before
// each shell command: one ALLOWED_COMMANDS allows is allowed by the
// wrapper unasked, one it does not is a permission_request to the task's
// owner (in a process of its own per task): allowed, it runs.
func TestRealQwenApproval(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentQwen)
	e.cfg.Approval, e.cfg.ApprovalTimeout = true, 60*time.Second
	e.cfg.AllowedCommands, _ = protocol.ParseAllowedCommands([]string{"engineering.deploy"})
	binDir, ranDir := commandBin(t, "engineering")
	environ = append(environ, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	e.start(environ...)
	marker := filepath.Join(e.cfg.Workspace, "approved")
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(protocol.AgentQwen, "engineering deploy --env prod")},
		{ToolUse: shellTool(protocol.AgentQwen, "touch "+marker)},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	input := e.keys.Input(e.cfg.WorkerID)
	e.send(input, protocol.Task{RequestID: "ap", Prompt: "deploy, then touch it"})
	var p protocol.PermissionRequest
	testkit.Eventually(t, "permission request", 60*time.Second, func() bool {
		ps := e.permissionRequests()
		if len(ps) > 0 {
			p = ps[0]
		}
		return len(ps) > 0
	})
	if p.Tool != "Bash" || !strings.Contains(string(p.Input), "touch "+marker) {
		t.Fatalf("permission request %+v: want the touch only (the deploy is allowed by the list)", p)
	}
	e.sendDoc(input)(protocol.NewPermissionReply("ap", p.PermissionID, true, "").Encode())
	if o := e.outputOf("ap", 60*time.Second); o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the approved command did not run: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ranDir, "engineering.ran")); err != nil || string(b) != "deploy --env prod\n" {
		t.Errorf("the allowed command ran as %q (%v)", b, err)
	}
	if ps := e.permissionRequests(); len(ps) != 1 {
		t.Errorf("%d permission requests, want the one", len(ps))
	}
}
