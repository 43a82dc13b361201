package worker

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// buildTestMCP builds the repository's test MCP server (../../testmcp, on
// the official MCP Go SDK) for one test.
func buildTestMCP(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testmcp")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/testmcp")
	cmd.Dir = filepath.Join("..", "..", "testmcp")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testmcp: %v\n%s", err, out)
	}
	return bin
}

// mcpToolName is the name under which each CLI offers the model a tool of
// an MCP server.
func mcpToolName(agentType protocol.AgentType, server, tool string) string {
	switch agentType {
	case protocol.AgentDroid:
		return server + "___" + tool
	case protocol.AgentOpenCode:
		return server + "_" + tool
	}
	return "mcp__" + server + "__" + tool
}

// echoAnswer is what testmcp's echo tool answers (testmcp.Answer).
func echoAnswer(text, tag string) string { return "testmcp echo: " + text + " (tag " + tag + ")" }

// echoTask sends the worker its n-th task (counting from 1), in which the
// stub model calls the echo tool of server with text and quotes the
// tool's answer in its stop output. It returns the task's output and the
// echo that output carries ("" when none).
func (e *env) echoTask(stub *stubmodel.Server, agentType protocol.AgentType, server, text, requestID string, n int) (protocol.Output, string) {
	e.t.Helper()
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: mcpToolName(agentType, server, "echo"), Input: map[string]any{"text": text}}},
		{Text: "The tool answered.\n{\"status\": \"complete\", \"result\": {\"echo\": \"" + stubmodel.ToolResultPlaceholder + "\"}}"},
	}})
	e.send(e.keys.Input(e.cfg.WorkerID), protocol.Task{RequestID: requestID, ProjectID: "p", Prompt: "Call the echo tool."})
	o := e.waitOutputs(e.keys.Output(e.cfg.WorkerID), n, 60*time.Second)[n-1]
	var result struct{ Echo string }
	_ = json.Unmarshal(o.Result, &result)
	if agentType == protocol.AgentCodex {
		// Codex heads an MCP tool's answer: "Wall time: ...\nOutput:\n".
		if _, after, ok := strings.Cut(result.Echo, "\nOutput:\n"); ok && strings.HasPrefix(result.Echo, "Wall time: ") {
			result.Echo = after
		}
	}
	return o, result.Echo
}

// The real CLI, scripted by the stub model, calls the echo tool of the
// spec's stdio MCP server (with the env the spec gives it); the tool's
// answer reaches the model, which quotes it in its stop output, and so the
// task's output. With ALLOWED_COMMANDS a list (Claude's dontAsk mode), the
// spec's servers' tools are allowed.
func TestMCPServerToolReachesTheOutput(t *testing.T) {
	bin := buildTestMCP(t)
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		tag := "tag-" + string(agentType)
		e.cfg.MCPServers = []protocol.MCPServer{{Name: "tm", Command: bin, Env: map[string]string{"TESTMCP_TAG": tag}}}
		e.cfg.MCPTimeout = 20 * time.Second
		e.start(environ...)
		tool := mcpToolName(agentType, "tm", "echo")
		o, echo := e.echoTask(stub, agentType, "tm", "hello over MCP", "mcp-"+string(agentType), 1)
		want := echoAnswer("hello over MCP", tag)
		if o.Status != protocol.StatusComplete || echo != want {
			t.Fatalf("output %+v (result %s, error %+v), want the echo %q", o, o.Result, o.Error, want)
		}
		reqs := stub.Requests()
		// Droid defers MCP tools: it names them in the prompt, for its
		// ToolSearch, rather than in the request's tools.
		if len(reqs) < 2 || !slices.Contains(reqs[0].Tools, tool) && !strings.Contains(reqs[0].System+reqs[0].Text(), tool) {
			t.Fatalf("the model was not offered %s (%d requests)", tool, len(reqs))
		}
		if !strings.Contains(reqs[1].Text(), want) {
			t.Errorf("the tool result did not reach the model: %q", reqs[1].Text())
		}
	})
}

// A server that exits at once fails the task with MCP_UNAVAILABLE as soon
// as the agent shows it, naming the server: the model's first answer
// (held back 3 s, a tool call) never gets to run, and no second turn
// comes.
func TestBrokenMCPServerFailsFast(t *testing.T) {
	bin := buildTestMCP(t)
	checks := func(c agent.Capabilities) bool { return c.NoMCPCheck == "" } // OpenCode: ACP says nothing of its servers
	eachRealAgentThat(t, checks, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		e.cfg.MCPServers = []protocol.MCPServer{
			{Name: "tm", Command: bin},
			{Name: "broken", Command: "false"},
		}
		e.cfg.MCPTimeout = 20 * time.Second
		e.start(environ...)
		in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{ToolUse: shellTool(agentType, "worker-wrapper progress --step went-on-without-mcp"), DelayMS: 3000},
			{Text: "{\"status\": \"complete\", \"result\": {}}"},
		}})
		start := time.Now()
		e.send(in, protocol.Task{RequestID: "broken-" + string(agentType), Prompt: "Use the tools."})
		o := e.waitOutputs(out, 1, 60*time.Second)[0]
		took := time.Since(start)
		if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeMCPUnavailable ||
			!strings.Contains(o.Error.Message, "broken") || strings.Contains(o.Error.Message, "tm (") || !o.Error.Retryable {
			t.Fatalf("output %+v (error %+v), want MCP_UNAVAILABLE naming broken (Claude: broken only)", o, o.Error)
		}
		if took > 15*time.Second {
			t.Errorf("MCP_UNAVAILABLE after %s: not fast", took)
		}
		for _, r := range stub.Requests() {
			if r.Step >= 1 {
				t.Errorf("the model ran a second turn: the agent went on without its server")
			}
		}
		if _, prog := e.docs(out); len(prog) != 0 {
			t.Errorf("the agent ran its tool call without its MCP server: %+v", prog)
		}
		t.Logf("%s: MCP_UNAVAILABLE after %s: %s", agentType, took.Round(time.Millisecond), o.Error.Message)
	})
}

// An HTTP MCP server (testmcp -http, streamable HTTP) works as a stdio
// one does, and gets the spec's headers (its answer carries one, which
// the output has redacted).
func TestMCPServerOverHTTP(t *testing.T) {
	bin := buildTestMCP(t)
	srv := exec.Command(bin, "-http", "127.0.0.1:0")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("testmcp -http printed no URL: %v", err)
	}
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		tag := "hdr-" + string(agentType) // the header testmcp answers with (testmcp.TagHeader)
		e.cfg.MCPServers = []protocol.MCPServer{{Name: "web", URL: strings.TrimSpace(url), Headers: map[string]string{"X-Testmcp-Tag": tag}}}
		e.cfg.MCPTimeout = 20 * time.Second
		e.start(environ...)
		// The server answered with the header's value, which the model
		// saw; the output has it redacted, as a header is a credential.
		o, echo := e.echoTask(stub, agentType, "web", "over HTTP", "mcp-http-"+string(agentType), 1)
		if o.Status != protocol.StatusComplete || echo != echoAnswer("over HTTP", "[REDACTED]") {
			t.Fatalf("output %+v (result %s, error %+v)", o, o.Result, o.Error)
		}
		if reqs := stub.Requests(); len(reqs) < 2 || !strings.Contains(reqs[1].Text(), echoAnswer("over HTTP", tag)) {
			t.Fatalf("the header's value did not come back from the server (%d requests)", len(reqs))
		}
	})
}

// The MCP servers' settings are redacted as secrets. The configuration
// each CLI gets, and the check of its init line, are its adapter's
// (package agent).
func TestMCPSecrets(t *testing.T) {
	secret := &Config{MCPServers: []protocol.MCPServer{
		{Name: "a", Command: "a", Env: map[string]string{"TICKETS_TOKEN": "tok-123456", "MODE": "readonly-mode"}},
		{Name: "b", URL: "https://b/mcp", Headers: map[string]string{"Authorization": "Bearer hdr-123456"}},
	}}
	r := NewRedactor(secret.mcpSecrets(), "")
	if got := r.Redact("tok-123456 / Bearer hdr-123456 / readonly-mode"); got != "[REDACTED] / [REDACTED] / readonly-mode" {
		t.Errorf("MCP secrets: %q", got)
	}
}

// A persistent Claude or Codex process (AGENT_PERSISTENT, and
// AGENT_PREWARM, as warm pools run it) has the spec's servers too: its
// tools work across tasks (a persistent Codex's MCP tool calls approved by
// the wrapper), and a broken server fails every task with MCP_UNAVAILABLE
// (Claude: an abort, no death of the process that would turn persistence
// off; Codex refuses to open the thread, and the task's own `codex exec`
// names the server).
func TestMCPWithPersistentAgents(t *testing.T) {
	bin := buildTestMCP(t)
	working := []protocol.MCPServer{{Name: "tm", Command: bin, Env: map[string]string{"TESTMCP_TAG": "p"}}}
	broken := []protocol.MCPServer{{Name: "tm", Command: bin}, {Name: "broken", Command: "false"}}
	for _, agentType := range []protocol.AgentType{protocol.AgentClaude, protocol.AgentCodex} {
		for _, tc := range []struct {
			name    string
			servers []protocol.MCPServer
			prewarm bool // AGENT_PREWARM: the process starts before the first task
		}{
			{"working", working, false},
			{"broken", broken, false},
			{"working prewarmed", working, true},
			{"broken prewarmed", broken, true},
		} {
			t.Run(string(agentType)+" "+tc.name, func(t *testing.T) {
				t.Parallel()
				e, stub, environ := realAgentEnv(t, agentType)
				e.cfg.Persistent, e.cfg.Prewarm = true, tc.prewarm
				e.cfg.MCPServers, e.cfg.MCPTimeout = tc.servers, 20*time.Second
				if agentType == protocol.AgentCodex { // a list: Codex asks before each MCP tool call
					e.cfg.AllowedCommands, _ = protocol.ParseAllowedCommands([]string{"git.status"})
				}
				e.start(environ...)
				for i, text := range []string{"first", "second"} {
					o, echo := e.echoTask(stub, agentType, "tm", text, strings.ReplaceAll(tc.name, " ", "-")+"-"+text, i+1)
					switch {
					case strings.HasPrefix(tc.name, "broken") && (o.Error == nil || o.Error.Code != protocol.CodeMCPUnavailable):
						t.Fatalf("task %d: %+v (error %+v), want MCP_UNAVAILABLE", i, o, o.Error)
					case strings.HasPrefix(tc.name, "working") && (o.Status != protocol.StatusComplete || echo != echoAnswer(text, "p")):
						t.Fatalf("task %d: %+v (result %s, error %+v)", i, o, o.Result, o.Error)
					}
				}
				if agentType == protocol.AgentCodex && strings.HasPrefix(tc.name, "working") {
					e.ranInAppServer()
				}
			})
		}
	}
}

// The agent waits for a server that takes a while to start (2 s here):
// both CLIs would otherwise begin without it. A server that never answers
// fails the task when AGENT_MCP_TIMEOUT (3 s here) runs out (Claude,
// Codex; Droid gives up by its own limit, about 30 s).
func TestSlowAndHungMCPServers(t *testing.T) {
	bin := buildTestMCP(t)
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		e.cfg.MCPServers = []protocol.MCPServer{{Name: "slow", Command: "sh", Args: []string{"-c", "sleep 2; exec " + bin}}}
		e.cfg.MCPTimeout = 20 * time.Second
		e.start(environ...)
		if o, echo := e.echoTask(stub, agentType, "slow", "late", "slow-"+string(agentType), 1); o.Status != protocol.StatusComplete || echo != echoAnswer("late", "") {
			t.Fatalf("slow server: %+v (result %s, error %+v)", o, o.Result, o.Error)
		}
	})
	for _, agentType := range []protocol.AgentType{protocol.AgentClaude, protocol.AgentCodex} {
		t.Run(string(agentType)+" hung", func(t *testing.T) {
			t.Parallel()
			e, _, environ := realAgentEnv(t, agentType)
			e.cfg.MCPServers = []protocol.MCPServer{{Name: "hung", Command: "sleep", Args: []string{"600"}}}
			e.cfg.MCPTimeout = 3 * time.Second
			e.start(environ...)
			in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
			start := time.Now()
			e.send(in, protocol.Task{RequestID: "hung", Prompt: "Call the echo tool."})
			o := e.waitOutputs(out, 1, 60*time.Second)[0]
			took := time.Since(start)
			if o.Error == nil || o.Error.Code != protocol.CodeMCPUnavailable || !strings.Contains(o.Error.Message, "hung") {
				t.Fatalf("hung server: %+v (error %+v), want MCP_UNAVAILABLE", o, o.Error)
			}
			if took < 3*time.Second || took > 20*time.Second {
				t.Errorf("MCP_UNAVAILABLE after %s, want about AGENT_MCP_TIMEOUT (3s)", took)
			}
			t.Logf("after %s: %s", took.Round(time.Millisecond), o.Error.Message)
		})
	}
}
