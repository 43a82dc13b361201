package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Transcripts of the real codex 0.171.0 (`codex exec --json`) against the
// stub model (testdata/codex): one with a shell call, its resume, a 401
// retried, and a 401 with retries off.
func TestCodexCapturedToolCall(t *testing.T) {
	o := parseFile(t, "testdata/codex/exec_tool_call.jsonl", &CodexParser{})
	if o.Init == nil || o.Init.SessionID != "01a21a42-0c19-7ba2-bcc5-f18577738562" {
		t.Fatalf("init %+v", o.Init)
	}
	r := o.Result
	if r == nil || r.IsError || r.SessionID != o.Init.SessionID || !strings.HasPrefix(r.Text, "Done.\n{\"status\": \"complete\"") {
		t.Fatalf("result %+v", r)
	}
	// 22200 input tokens, of which 18000 cached: two calls of 2000 + 9000 + 100.
	if want := (protocol.Usage{Input: 4200, CacheRead: 18000, Output: 160}); r.Usage != want {
		t.Errorf("usage %+v, want %+v", r.Usage, want)
	}
	if o.LastTurn != nil {
		t.Errorf("a turn %+v: Codex reports no call's usage", o.LastTurn)
	}
	v := Judge(o, false)
	if v.Status != protocol.StatusComplete || !strings.Contains(string(v.Result), "hi-from-shell") {
		t.Errorf("verdict %+v", v)
	}
	var calls []string
	for _, line := range readLines(t, "testdata/codex/exec_tool_call.jsonl") {
		for _, ev := range (&CodexParser{}).ParseLine(line) {
			if ev.ToolCall != nil {
				calls = append(calls, ev.ToolCall.Name+":"+string(ev.ToolCall.Input))
			}
			if ev.Retry != nil || ev.Result != nil && ev.Result.IsError {
				t.Errorf("the warning items made %+v", ev)
			}
		}
	}
	if !slices.Equal(calls, []string{`Bash:{"command":"/bin/bash -lc 'echo hi-from-shell'"}`}) {
		t.Errorf("tool calls %q: one, at its item.started", calls)
	}
}

func TestCodexCapturedResumeAndErrors(t *testing.T) {
	o := parseFile(t, "testdata/codex/exec_resume.jsonl", &CodexParser{})
	if o.Result == nil || o.Result.SessionID != "01a21a42-0c19-7ba2-bcc5-f18577738562" || Judge(o, false).Status != protocol.StatusComplete {
		t.Fatalf("resume: %+v", o.Result)
	}
	o = parseFile(t, "testdata/codex/exec_retried_error.jsonl", &CodexParser{})
	if rt := o.LastRetry; rt == nil || rt.Attempt != 1 || rt.MaxRetries != 5 || rt.Status != 401 {
		t.Fatalf("retry %+v", rt)
	}
	if Judge(o, false).Status != protocol.StatusComplete {
		t.Errorf("a retried call that then succeeded: %+v", Judge(o, false))
	}
	o = parseFile(t, "testdata/codex/exec_turn_failed.jsonl", &CodexParser{})
	v := Judge(o, false)
	if o.Result == nil || !o.Result.IsError || o.Result.APIErrorStatus != 401 || v.Error == nil || v.Error.Code != protocol.CodeAgentError ||
		!strings.Contains(v.Error.Message, "API status 401") {
		t.Fatalf("turn.failed: %+v, verdict %+v", o.Result, v.Error)
	}
}

func TestCodexParserOtherItems(t *testing.T) {
	p := &CodexParser{}
	evs := p.ParseLine([]byte(`{"type":"item.completed","item":{"id":"i","type":"mcp_tool_call","server":"tm","tool":"echo","arguments":{"x":1},"status":"completed"}}`))
	if len(evs) != 1 || evs[0].ToolCall.Name != "mcp__tm__echo" || string(evs[0].ToolCall.Input) != `{"x":1}` {
		t.Fatalf("mcp call %+v", evs)
	}
	evs = p.ParseLine([]byte(`{"type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":90,"output_tokens":-3}}`))
	if u := evs[0].Result.Usage; u.Input != 0 || u.CacheRead != 5 || u.Output != 0 {
		t.Fatalf("untrusted usage %+v: cached is at most the input, none negative", u)
	}
}

func readLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	for _, l := range strings.Split(string(b), "\n") {
		lines = append(lines, []byte(l))
	}
	return lines
}

func TestCodexArgv(t *testing.T) {
	allowed, err := protocol.ParseAllowedCommands([]string{"git.status"})
	if err != nil {
		t.Fatal(err)
	}
	c := adapterFor(t, protocol.AgentCodex, Settings{Bin: "codex", Model: "gpt-5-codex", SystemPrompt: "SYS \"q\"\nline",
		AllowedCommands: allowed, SelfPath: "/opt/it's/worker-wrapper", Args: []string{"--extra"}})
	argv := c.Argv(Invocation{Prompt: "p", Extra: "CTX"})
	got := strings.Join(argv, " ")
	for _, want := range []string{"codex exec --json --skip-git-repo-check", `approval_policy="never"`, `sandbox_mode="danger-full-access"`,
		"shell_environment_policy.ignore_default_excludes=true", `developer_instructions="SYS \"q\"\nline\nCTX"`,
		"--dangerously-bypass-hook-trust", `command="'/opt/it'\\''s/worker-wrapper' guard"`, "-m gpt-5-codex --extra -"} {
		if !strings.Contains(got, want) {
			t.Errorf("argv %q lacks %q", got, want)
		}
	}
	if string(c.Stdin(Invocation{Prompt: "p"})) != "p" {
		t.Error("the prompt goes on stdin")
	}
	argv = c.Argv(Invocation{Prompt: "p", ResumeID: "thread-1"})
	if argv[1] != "exec" || argv[2] != "resume" || argv[len(argv)-2] != "thread-1" || argv[len(argv)-1] != "-" {
		t.Errorf("resume argv %q", argv)
	}
	all, _ := protocol.ParseAllowedCommandsEnv("*")
	if got := strings.Join(adapterFor(t, protocol.AgentCodex, Settings{Bin: "codex", AllowedCommands: all}).Argv(Invocation{}), " "); strings.Contains(got, "hook") {
		t.Errorf("ALLOWED_COMMANDS=* still hooks: %q", got)
	}
	if caps := c.Caps(); caps.NoPersistent != "" || !caps.Approvals || !caps.OpensSession || caps.ReportsCost {
		t.Errorf("caps %+v", caps)
	}

	// The persistent process: the app-server with the same settings, its
	// model as a setting, no hook (its approval requests are answered).
	got = strings.Join(c.PersistentArgv(Invocation{Extra: "CTX"}), " ")
	for _, want := range []string{"codex app-server -c", `approval_policy="never"`, `sandbox_mode="danger-full-access"`,
		"allow_login_shell=false", `developer_instructions="SYS \"q\"\nline\nCTX"`, `-c model="gpt-5-codex" --extra`} {
		if !strings.Contains(got, want) {
			t.Errorf("persistent argv %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "hook") || strings.Contains(got, "--json") || strings.Contains(got, " -m ") {
		t.Errorf("persistent argv %q", got)
	}
}

func TestCodexSetupAndRoute(t *testing.T) {
	all, _ := protocol.ParseAllowedCommandsEnv("*")
	home := t.TempDir()
	c := adapterFor(t, protocol.AgentCodex, Settings{Bin: "codex", AllowedCommands: all})
	if err := c.Setup(home, ModelAPI{URL: "http://127.0.0.1:5555", Token: "tok"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(home, ".codex", "config.toml"))
	if err != nil || !strings.Contains(string(b), `base_url = "http://127.0.0.1:5555/v1"`) || !strings.Contains(string(b), `wire_api = "responses"`) ||
		!strings.Contains(string(b), `env_key = "AGENTVISOR_MODEL_TOKEN"`) || strings.Contains(string(b), "tok") {
		t.Fatalf("config.toml: %v\n%s", err, b)
	}
	if env := c.Env(ModelAPI{URL: "u", Token: "tok"}); !slices.Equal(env, []string{"AGENTVISOR_MODEL_TOKEN=tok"}) {
		t.Errorf("env %q", env)
	}
	get := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	r := c.Route(get(map[string]string{"OPENAI_API_KEY": "sk-o", "OPENAI_BASE_URL": "https://llm.example/v1/"}))
	if !r.Proxied || r.Upstream != "https://llm.example" || r.Credential == nil || r.Credential.AuthToken != "sk-o" {
		t.Errorf("route %+v", r)
	}
	if r := c.Route(get(nil)); r.Upstream != DefaultOpenAIUpstream {
		t.Errorf("default route %+v", r)
	}
	mcp := adapterFor(t, protocol.AgentCodex, Settings{AllowedCommands: all, MCPServers: testServers, MCPTimeout: 20 * time.Second})
	if err := mcp.Setup(home, ModelAPI{URL: "http://127.0.0.1:5555", Token: "tok"}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(home, ".codex", "config.toml"))
	for _, want := range []string{`[mcp_servers."tm"]`, `command = "/bin/testmcp"`, `args = ["-v"]`, `env = {"TAG" = "x"}`,
		`[mcp_servers."web"]`, `url = "https://mcp.example/mcp"`, `http_headers = {"Authorization" = "Bearer t"}`,
		"required = true\nstartup_timeout_sec = 20", `model_provider = "agentvisor"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config.toml lacks %s:\n%s", want, b)
		}
	}
	// Codex refuses to start without a required server: MCP_UNAVAILABLE.
	o := mcp.CheckOutcome(Outcome{Exit: ExitStatus{Code: 1}, Stderr: "ERROR codex_core::session: Failed to create session: required MCP servers failed to initialize: web: handshaking failed\nmore"})
	if o.Aborted == nil || o.Aborted.Code != protocol.CodeMCPUnavailable || !strings.Contains(o.Aborted.Message, "web: handshaking failed") || strings.Contains(o.Aborted.Message, "more") {
		t.Fatalf("abort %+v", o.Aborted)
	}
	if o := mcp.CheckOutcome(Outcome{Exit: ExitStatus{Code: 1}, Stderr: "something else"}); o.Aborted != nil {
		t.Errorf("another failure made %+v", o.Aborted)
	}
}
