package worker

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// These tests run the real claude, droid, codex, opencode and qwen
// binaries (installed by `make setup`) through the wrapper, against the
// stub model server (its Messages API for Claude, Droid and OpenCode, its
// Responses API for Codex, its Chat Completions for Qwen Code).

// realAgentTypes are the agent types the tests over every real agent
// run (eachRealAgent, TestRealAgents): every CLI. acp is no CLI of its
// own: the fake ACP agent stands in for one (acp_test.go).
var realAgentTypes = []protocol.AgentType{protocol.AgentClaude, protocol.AgentDroid, protocol.AgentCodex, protocol.AgentOpenCode, protocol.AgentQwen}

func realAgentEnv(t *testing.T, agentType protocol.AgentType) (*env, *stubmodel.Server, []string) {
	t.Helper()
	bin, err := exec.LookPath(string(agentType))
	if err != nil {
		t.Fatalf("the real %s CLI is not installed (run `make setup`): %v", agentType, err)
	}
	stub, err := stubmodel.Start(stubmodel.Script{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	e := newEnv(t, agentType, protocol.KindLongLived)
	e.cfg.AgentBin = bin
	e.cfg.ResultGrace = 2 * time.Second
	environ := []string{"HOME=" + t.TempDir(), "ANTHROPIC_API_KEY=sk-stub-key-0123456789"}
	switch agentType {
	case protocol.AgentClaude, protocol.AgentOpenCode:
		environ = append(environ, "ANTHROPIC_BASE_URL="+stub.URL)
	case protocol.AgentCodex, protocol.AgentQwen:
		environ = append(environ, "OPENAI_API_KEY=sk-stub-key-0123456789", "OPENAI_BASE_URL="+stub.URL+"/v1")
		// The stub answers under the model asked for, which MODEL_PRICES
		// prices (OpenAI's and Qwen's models have no default price).
		e.cfg.AgentModel = "gpt-stub"
		if e.cfg.Prices, err = protocol.ParseModelPrices(openAIStubPrices); err != nil {
			t.Fatal(err)
		}
	default:
		e.cfg.DroidBaseURL = stub.URL
	}
	return e, stub, environ
}

// requestCarrying returns the text of the first request to the stub that
// holds marker (a tool's output, a turn of an earlier task): an agent may
// send requests of its own around the turn (a summary, a side query), so
// the last request is not always the one. It fails listing each
// request's end when none holds it.
func requestCarrying(t *testing.T, reqs []stubmodel.Request, marker string) string {
	t.Helper()
	var ends []string
	for i, r := range reqs {
		text := r.Text()
		if strings.Contains(text, marker) {
			return text
		}
		ends = append(ends, fmt.Sprintf("request %d (%d messages) ends: %q", i, len(r.Messages), text[max(0, len(text)-600):]))
	}
	t.Fatalf("no request of %d holds %q:\n%s", len(reqs), marker, strings.Join(ends, "\n"))
	return ""
}

// openAIStubPrices prices the model realAgentEnv gives Codex and Qwen
// Code: $1 per million input tokens, $10 output, $0.1 cache reads.
const openAIStubPrices = `{"gpt-stub": {"input": 1, "output": 10, "cache_read": 0.1, "cache_write": 0}}`

// openAIAgent says whether the agent speaks OpenAI's APIs (Codex the
// Responses API, Qwen Code Chat Completions).
func openAIAgent(agentType protocol.AgentType) bool {
	return agentType == protocol.AgentCodex || agentType == protocol.AgentQwen
}

// lingering makes command, for Qwen Code, live a second after its output:
// Qwen Code 0.24.4 now and then reports the output of a command that exits
// at once as empty on a loaded machine (1 run in 6 under two busy loops
// here; none in 8 with the second), and the tests read that output. The
// runtime cannot mend it: an agent's own tool calls are the agent's.
func lingering(agentType protocol.AgentType, command string) string {
	if agentType == protocol.AgentQwen {
		return command + "; sleep 1"
	}
	return command
}

// shellTool is a call of the agent's shell tool; "Bash" for the agents of
// OpenAI's APIs, whose shell tool the stub finds in their request.
func shellTool(agentType protocol.AgentType, command string) *stubmodel.ToolUse {
	switch agentType {
	case protocol.AgentDroid:
		return &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{"command": command, "riskLevel": "low", "riskLevelReason": "reports progress"}}
	case protocol.AgentOpenCode:
		return &stubmodel.ToolUse{Name: "bash", Input: map[string]any{"command": command, "description": "report progress"}}
	}
	return &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": command, "description": "report progress"}}
}

// eachRealAgent runs fn, in parallel, for each agent type with its real
// CLI, a stub model and a worker configured for them (not started yet).
func eachRealAgent(t *testing.T, fn func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string)) {
	eachRealAgentThat(t, func(agent.Capabilities) bool { return true }, fn)
}

// eachRealAgentThat is eachRealAgent for the agent types whose
// capabilities keep says yes to.
func eachRealAgentThat(t *testing.T, keep func(agent.Capabilities) bool,
	fn func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string)) {
	for _, agentType := range realAgentTypes {
		ad, err := agent.New(agentType, agent.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		if !keep(ad.Caps()) {
			continue
		}
		t.Run(string(agentType), func(t *testing.T) {
			t.Parallel()
			e, stub, environ := realAgentEnv(t, agentType)
			fn(t, agentType, e, stub, environ)
		})
	}
}

func TestRealAgents(t *testing.T) {
	for _, agentType := range realAgentTypes {
		t.Run(string(agentType), func(t *testing.T) {
			t.Parallel()
			e, stub, environ := realAgentEnv(t, agentType)
			if agentType == protocol.AgentQwen { // its lingering progress call is two commands
				e.cfg.AllowedCommands, _ = protocol.ParseAllowedCommandsEnv("*")
			}
			e.start(environ...)
			in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)

			// 1. Complete, reporting progress through the agent's shell tool.
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
				{ToolUse: shellTool(agentType, lingering(agentType, `worker-wrapper progress --step "Running tests" --pct 50 --output "41 passed"`))},
				{Text: "All done.\n```json\n{\"status\": \"complete\", \"result\": {\"pr\": 42}}\n```"},
			}})
			e.send(in, protocol.Task{RequestID: "complete", Prompt: "Fix the build and report progress."})
			outs := e.waitOutputs(out, 1, 60*time.Second)
			o := outs[0]
			if o.Status != protocol.StatusComplete || string(o.Result) != `{"pr":42}` || o.SessionID == "" {
				t.Fatalf("complete: %+v (error %+v)", o, o.Error)
			}
			wantInput := 2 * stubmodel.DefaultUsage.InputTokens
			if openAIAgent(agentType) { // OpenAI counts no cache writes apart
				wantInput += 2 * stubmodel.DefaultUsage.CacheCreationInputTokens
			}
			if o.Usage.Input != wantInput || o.Usage.CacheRead != 2*stubmodel.DefaultUsage.CacheReadInputTokens {
				t.Errorf("usage %+v, want the sum of two calls", o.Usage)
			}
			if want := (4200*1 + 160*10 + 18000*0.1) / 1e6; openAIAgent(agentType) && (!near(o.CostUSD, want) || !o.CostEstimated) {
				t.Errorf("cost %v (estimated %v), want %v priced by MODEL_PRICES", o.CostUSD, o.CostEstimated, want)
			}
			// Claude reports each call; for the others the proxy meters it.
			if o.ContextTokens != stubmodel.DefaultUsage.InputTokens+stubmodel.DefaultUsage.CacheReadInputTokens+stubmodel.DefaultUsage.CacheCreationInputTokens {
				t.Errorf("context tokens %d, want the last call's", o.ContextTokens)
			}
			_, prog := e.docs(out)
			if len(prog) != 1 || prog[0].Step != "Running tests" || prog[0].Output != "41 passed" || prog[0].RequestID != "complete" {
				t.Fatalf("progress through the %s shell tool: %+v", agentType, prog)
			}
			reqs := stub.Requests()
			if len(reqs) < 2 {
				t.Fatalf("%d model requests, want the task's and the tool result's", len(reqs))
			}
			if !strings.Contains(reqs[0].System, "worker-wrapper progress") {
				t.Errorf("the system prompt lacks the wrapper's section")
			}
			requestCarrying(t, reqs[1:], "progress recorded") // the tool result reached the model

			// 2. Blocked with a question.
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
				{Text: "I need to know one thing.\n{\"status\": \"blocked\", \"question\": \"Which database?\"}"},
			}})
			e.send(in, protocol.Task{RequestID: "blocked", Prompt: "Add persistence."})
			outs = e.waitOutputs(out, 2, 60*time.Second)
			if o := outs[1]; o.Status != protocol.StatusBlocked || o.Question != "Which database?" {
				t.Fatalf("blocked: %+v", o)
			}

			// 3. Failed: the model API refuses the request.
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
				{Error: &stubmodel.HTTPError{Status: 400, Message: "prompt is too long"}, Repeat: 20},
			}})
			e.send(in, protocol.Task{RequestID: "failed", Prompt: "Anything."})
			outs = e.waitOutputs(out, 3, 60*time.Second)
			if o := outs[2]; o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeAgentError {
				t.Fatalf("failed: %+v (error %+v)", o, o.Error)
			}
			for _, o := range outs {
				if strings.Contains(o.Response, "sk-stub-key") || (o.Error != nil && strings.Contains(o.Error.Message, "sk-stub-key")) {
					t.Errorf("the API key leaked: %+v", o)
				}
			}
		})
	}
}
