package worker

import (
	"fmt"
	"maps"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
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

// A Codex worker takes AGENT_PERSISTENT (`codex app-server`); its
// AGENT_APPROVAL needs it (`codex exec` asks nobody), and says so.
func TestCodexPersistentAndApprovalConfig(t *testing.T) {
	base := map[string]string{"WORKER_ID": "w", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "codex"}
	with := func(kv ...string) map[string]string {
		m := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	if _, err := FromEnv(mapEnv(with("AGENT_PERSISTENT", "true", "AGENT_APPROVAL", "true"))); err != nil {
		t.Fatalf("persistent Codex with approvals: %v", err)
	}
	_, err := FromEnv(mapEnv(with("AGENT_APPROVAL", "true")))
	if err == nil || !strings.Contains(err.Error(), "AGENT_APPROVAL") || !strings.Contains(err.Error(), "Codex asks") {
		t.Fatalf("approvals in a process per task: %v", err)
	}
}

// A persistent Codex (`codex app-server`) serves a project's follow-up in
// the same process and thread (followUpInOneProcess: its progress call
// approved by the wrapper, as the list always allows it; the wrapper's
// section in its developer instructions), each task's usage, cost and
// context its own. A process that dies between tasks is replaced by one
// that resumes the thread (thread/resume); a task of another project gets
// a process of its own.
func TestPersistentCodex(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentCodex)
	e.cfg.Persistent = true
	allowed, err := protocol.ParseAllowedCommandsEnv("git.status")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.AllowedCommands = allowed
	e.start(environ...)
	o1, o2 := e.followUpInOneProcess(stub, protocol.AgentCodex)
	if o1.Usage.Input != 2*2100 || !near(o2.CostUSD, codexCallUSD) || o2.ContextTokens != 11100 {
		t.Errorf("usage %+v, cost $%g, context %d: want each task's own calls", o1.Usage, o2.CostUSD, o2.ContextTokens)
	}
	e.ranInAppServer()
	pids := e.taskPIDs()

	// The process group dies between tasks: the next task starts another
	// app-server, which resumes the thread, and completes in it.
	syscall.Kill(-pids[0], syscall.SIGKILL)
	testkit.Eventually(t, "the agent's death", 5*time.Second, func() bool { return syscall.Kill(pids[0], 0) != nil })
	o3 := e.runTask(protocol.Task{RequestID: "x3", ProjectID: "delta", Prompt: "third"})
	if o3.Status != protocol.StatusComplete || o3.SessionID != o1.SessionID || decision(o3) != "resume/continued" {
		t.Fatalf("after the process died: %s %+v (error %+v)", decision(o3), o3, o3.Error)
	}
	reqs := stub.Requests()
	if last := reqs[len(reqs)-1].Text(); !strings.Contains(last, "PERSIST-MARKER") || !strings.Contains(last, "third") {
		t.Fatalf("the resumed thread's request lacks the earlier turns:\n%s", last)
	}
	if pids := e.taskPIDs(); len(pids) != 3 || pids[2] == pids[0] {
		t.Fatalf("task pids %v: want the third task in a new process", pids)
	}
	e.ranInAppServer()

	// Another project: another process, a new thread.
	o4 := e.runTask(protocol.Task{RequestID: "x4", ProjectID: "epsilon", Prompt: "OTHER-PROJECT"})
	if o4.Status != protocol.StatusComplete || o4.SessionID == o1.SessionID || o4.SessionID == "" {
		t.Fatalf("another project: %s %+v", decision(o4), o4)
	}
	reqs = stub.Requests()
	if strings.Contains(reqs[len(reqs)-1].Text(), "PERSIST-MARKER") {
		t.Fatal("the other project's thread carries the first one's turns")
	}
	if pids := e.taskPIDs(); len(pids) != 4 || pids[3] == pids[2] {
		t.Fatalf("task pids %v: want another process for the other project", pids)
	}
	e.ranInAppServer()
}

// A cancel of a running task of a persistent Codex (a 30 s command) is
// turn/interrupt: see cancelsDuringACommand.
func TestPersistentCodexCancel(t *testing.T) {
	e := cancelsDuringACommand(t, protocol.AgentCodex)
	e.ranInAppServer()
}

// ranInAppServer fails the test unless the last task ran in a persistent
// `codex app-server`, still running (not in a `codex exec` of its own).
func (e *env) ranInAppServer() {
	e.t.Helper()
	pids := e.taskPIDs()
	if len(pids) == 0 {
		e.t.Fatal("no task started")
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[len(pids)-1]))
	if err != nil || !strings.Contains(string(cmdline), "\x00app-server\x00") {
		e.t.Fatalf("the task's agent %d is no running codex app-server: %q (%v)", pids[len(pids)-1], cmdline, err)
	}
}
