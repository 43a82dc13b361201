package worker

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// Codex's calls at openAIStubPrices: one answer of the stub's default usage
// (2100 input tokens as OpenAI counts them, 80 output, 9000 cached).
const codexCallUSD = (2100*1 + 80*10 + 9000*0.1) / 1e6

// A project's next task resumes the real Codex's session (codex exec
// resume <thread>): the same session id, the decision resume/continued,
// and the model request carries the first task's prompt.
func TestRealCodexResumesTheProjectSession(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentCodex)
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
	o1 := e.runTask(protocol.Task{RequestID: "r1", ProjectID: "delta", Prompt: "FIRST-MARKER remember this"})
	if o1.Status != protocol.StatusComplete || o1.SessionID == "" || decision(o1) != "new/no_session" {
		t.Fatalf("first task: %s %+v (error %+v)", decision(o1), o1, o1.Error)
	}
	o2 := e.runTask(protocol.Task{RequestID: "r2", ProjectID: "delta", Prompt: "second"})
	if o2.Status != protocol.StatusComplete || o2.SessionID != o1.SessionID || decision(o2) != "resume/continued" {
		t.Fatalf("second task: %s %+v (error %+v), first session %s", decision(o2), o2, o2.Error, o1.SessionID)
	}
	reqs := stub.Requests()
	if last := reqs[len(reqs)-1].Text(); !strings.Contains(last, "FIRST-MARKER") || !strings.Contains(last, "second") {
		t.Fatalf("the resumed request lacks the first turn:\n%s", last)
	}
	if !near(o2.CostUSD, codexCallUSD) || o2.Usage.Input != 2100 || o2.ContextTokens != 11100 {
		t.Fatalf("the resumed task's cost $%g, usage %+v, context %d: want its one call's, not the thread's", o2.CostUSD, o2.Usage, o2.ContextTokens)
	}
}

// A Codex task's max_budget_usd is guarded by the wrapper from what its
// proxy meters (Codex reports tokens, not dollars): the call that passes
// it stops the task, BUDGET_EXCEEDED, in the middle of a 30 s command,
// and no further model call reaches the upstream.
func TestRealCodexMaxBudget(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentCodex)
	allowed, err := protocol.ParseAllowedCommandsEnv("worker.progress,sleep.*")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.AllowedCommands = allowed
	e.start(environ...)
	big := stubmodel.Usage{InputTokens: 20_000, OutputTokens: 80}
	progress := func(step string) stubmodel.Step {
		return stubmodel.Step{ToolUse: shellTool(protocol.AgentCodex, `worker-wrapper progress --step "`+step+`"`)}
	}
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		progress("one"), progress("two"),
		{ToolUse: shellTool(protocol.AgentCodex, "sleep 30"), Usage: &big},
		progress("never"),
	}, Fallback: &stubmodel.Step{Text: finalText}})
	start := time.Now()
	o := e.runTask(protocol.Task{RequestID: "b1", ProjectID: "p", Prompt: "spend", MaxBudgetUSD: 0.01})
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeBudgetExceeded {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	if want := 2*codexCallUSD + (20_000*1+80*10)/1e6; !o.CostEstimated || !near(o.CostUSD, want) {
		t.Fatalf("cost $%g (estimated %v), want $%g", o.CostUSD, o.CostEstimated, want)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the task took %v: the budget did not stop the 30 s command", took)
	}
	if n := len(stub.Requests()); n != 3 {
		t.Fatalf("%d model calls reached the stub, want 3", n)
	}
	pids := e.taskPIDs()
	if syscall.Kill(pids[len(pids)-1], 0) == nil {
		t.Fatal("the Codex process lives on after the budget stop")
	}
}

// AGENT_PERSISTENT is refused for Codex at start, with the reason.
func TestCodexRefusesPersistent(t *testing.T) {
	_, err := FromEnv(mapEnv(map[string]string{"WORKER_ID": "w", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "codex",
		"AGENT_PERSISTENT": "true"}))
	if err == nil || !strings.Contains(err.Error(), "AGENT_PERSISTENT") || !strings.Contains(err.Error(), "codex exec") {
		t.Fatalf("err %v", err)
	}
}
