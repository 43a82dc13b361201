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

// These tests run the real CLIs the wrapper drives over ACP, OpenCode
// (`opencode acp`) and Qwen Code (`qwen --acp`), installed by `make
// setup`, against the stub model behind the wrapper's proxy (its Messages
// API for OpenCode, its Chat Completions for Qwen Code).

// realACPAgent is a CLI driven over ACP, with what its tests need of it.
type realACPAgent struct {
	agent protocol.AgentType
	// long is a shell command that runs 30 s, which the pattern allow
	// allows. Qwen Code refuses a foreground sleep of 2 s or more that
	// gives no reason, so its is wrapped.
	long, allow string
}

var realACPAgents = []realACPAgent{
	{protocol.AgentOpenCode, "sleep 30", "sleep.*"},
	{protocol.AgentQwen, "timeout 40 sleep 30", "timeout.*"},
}

// eachRealACPAgent runs fn, in parallel, for each CLI driven over ACP,
// with a stub model and a worker configured for them (not started yet).
func eachRealACPAgent(t *testing.T, fn func(t *testing.T, a realACPAgent, e *env, stub *stubmodel.Server, environ []string)) {
	for _, a := range realACPAgents {
		t.Run(string(a.agent), func(t *testing.T) {
			t.Parallel()
			e, stub, environ := realAgentEnv(t, a.agent)
			fn(t, a, e, stub, environ)
		})
	}
}

// A task: its progress call through the agent's shell tool and its tool
// calls as progress events, its stop output, its usage metered by the
// proxy; a command ALLOWED_COMMANDS does not allow is refused (OpenCode
// asks and the wrapper rejects; Qwen Code's guard hook refuses) and
// reported, and the turn goes on; the project's next task continues the
// session (session/load in a new process), the model request carrying the
// first turn, the task's usage its own call's.
func TestRealACPAgentTaskAndSession(t *testing.T) {
	eachRealACPAgent(t, func(t *testing.T, a realACPAgent, e *env, stub *stubmodel.Server, environ []string) {
		e.start(environ...)
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{ToolUse: shellTool(a.agent, `worker-wrapper progress --step "Running tests" --pct 50`)},
			{ToolUse: shellTool(a.agent, "rm -rf /tmp/agentvisor-nothing")},
			{Text: "All done.\n{\"status\": \"complete\", \"result\": {\"pr\": 42}}"},
		}, Fallback: &stubmodel.Step{Text: finalText}})
		o1 := e.runTask(protocol.Task{RequestID: "s1", ProjectID: "p", Prompt: "FIRST-MARKER fix the build"})
		if o1.Status != protocol.StatusComplete || string(o1.Result) != `{"pr":42}` || o1.SessionID == "" || decision(o1) != "new/no_session" {
			t.Fatalf("first task: %s %+v (error %+v)", decision(o1), o1, o1.Error)
		}
		perCall := stubmodel.DefaultUsage.InputTokens
		if openAIAgent(a.agent) { // OpenAI counts no cache writes apart
			perCall += stubmodel.DefaultUsage.CacheCreationInputTokens
		}
		if o1.Usage.Input != 3*perCall || !o1.CostEstimated || o1.CostUSD <= 0 {
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
		if reqs := stub.Requests(); !strings.Contains(reqs[0].System, "worker-wrapper progress") {
			t.Errorf("the system prompt lacks the wrapper's section")
		}

		o2 := e.runTask(protocol.Task{RequestID: "s2", ProjectID: "p", Prompt: "second"})
		if o2.Status != protocol.StatusComplete || o2.SessionID != o1.SessionID || decision(o2) != "resume/continued" {
			t.Fatalf("second task: %s %+v (error %+v), first session %s", decision(o2), o2, o2.Error, o1.SessionID)
		}
		reqs := stub.Requests()
		if last := reqs[len(reqs)-1].Text(); !strings.Contains(last, "FIRST-MARKER") || !strings.Contains(last, "second") {
			t.Fatalf("the continued session's request lacks the first turn:\n%s", last)
		}
		if o2.Usage.Input != perCall {
			t.Errorf("the second task's usage %+v: want its one call's", o2.Usage)
		}
	})
}

// A cancel of a running task (a 30 s command) is session/cancel: the
// output comes long before the command would end, CANCELLED; the
// persistent process stays and serves the next task of the session.
func TestRealACPAgentCancel(t *testing.T) {
	eachRealACPAgent(t, func(t *testing.T, a realACPAgent, e *env, stub *stubmodel.Server, environ []string) {
		allowed, err := protocol.ParseAllowedCommandsEnv("worker.progress," + a.allow)
		if err != nil {
			t.Fatal(err)
		}
		e.cfg.AllowedCommands, e.cfg.Persistent = allowed, true
		e.start(environ...)
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{Text: finalText},
			{ToolUse: shellTool(a.agent, a.long)},
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
				if p.RequestID == "k1" && strings.HasPrefix(p.Step, "tool: ") && strings.Contains(p.Step, "sleep") {
					return true
				}
			}
			return false
		})
		start := time.Now()
		e.sendCancel(input, "k1", "not needed")
		o1 := e.outputOf("k1", 30*time.Second)
		took := time.Since(start)
		if o1.Status != protocol.StatusCancelled || took > cancelEndsIt {
			t.Fatalf("cancel: %+v (error %+v) after %v", o1, o1.Error, took)
		}
		t.Logf("%s: the output %v after the cancel", a.agent, took)
		o2 := e.runTask(protocol.Task{RequestID: "k2", ProjectID: "p", Prompt: "after"})
		if pids := e.taskPIDs(); o2.Status != protocol.StatusComplete || o2.SessionID != o0.SessionID || pids[len(pids)-1] != pids[0] {
			t.Fatalf("after the cancel: %+v (error %+v), pids %v", o2, o2.Error, pids)
		}
	})
}

// A task's max_budget_usd is guarded by the wrapper from what its proxy
// meters: the call that passes it stops the task, BUDGET_EXCEEDED, in the
// middle of a 30 s command; no further model call reaches the upstream,
// and the agent's process is gone.
func TestRealACPAgentMaxBudget(t *testing.T) {
	eachRealACPAgent(t, func(t *testing.T, a realACPAgent, e *env, stub *stubmodel.Server, environ []string) {
		allowed, err := protocol.ParseAllowedCommandsEnv("worker.progress," + a.allow)
		if err != nil {
			t.Fatal(err)
		}
		e.cfg.AllowedCommands = allowed
		e.start(environ...)
		big := stubmodel.Usage{InputTokens: 2_000_000, OutputTokens: 80}
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{ToolUse: shellTool(a.agent, `worker-wrapper progress --step "one"`)},
			{ToolUse: shellTool(a.agent, a.long), Usage: &big},
			{ToolUse: shellTool(a.agent, `worker-wrapper progress --step "never"`)},
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
			t.Fatalf("the %s process lives on after the budget stop", a.agent)
		}
	})
}

// With AGENT_APPROVAL the agent asks (session/request_permission) before
// each shell command, in a process of its own per task: one
// ALLOWED_COMMANDS allows is allowed by the wrapper unasked, one it does
// not is a permission_request to the task's owner: allowed, it runs.
func TestRealACPAgentApproval(t *testing.T) {
	eachRealACPAgent(t, func(t *testing.T, a realACPAgent, e *env, stub *stubmodel.Server, environ []string) {
		e.cfg.Approval, e.cfg.ApprovalTimeout = true, 60*time.Second
		e.cfg.AllowedCommands, _ = protocol.ParseAllowedCommands([]string{"engineering.deploy"})
		binDir, ranDir := commandBin(t, "engineering")
		environ = append(environ, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		e.start(environ...)
		marker := filepath.Join(e.cfg.Workspace, "approved") // in the workspace: OpenCode asks again for a path outside it
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{ToolUse: shellTool(a.agent, "engineering deploy --env prod")},
			{ToolUse: shellTool(a.agent, "touch "+marker)},
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
			t.Fatalf("permission request %+v: want the touch only (the list allows the deploy)", p)
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
	})
}
