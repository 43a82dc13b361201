package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// CodexParser parses `codex exec --json` (Codex 0.171): thread.started
// (the session), item.started / item.completed (agent messages, command
// executions, MCP tool calls, file changes, warnings), error (a retry, or
// the failure turn.failed then reports), and turn.completed with the
// turn's usage. Codex prints no final text of its own: the result's text
// is the turn's last agent message, so a parser keeps state and serves one
// run (Adapter.Parser makes a new one for each).
//
// Usage: turn.completed gives the turn's tokens summed over its model
// calls, and in a resumed session the thread's running totals; its
// input_tokens include the cached ones (OpenAI's count), which the parser
// splits into Input and CacheRead. No event gives one call's usage, so a
// Codex run yields no Turn events (as Droid's): the wrapper's proxy
// meters each call for the task's usage, cost and context.
type CodexParser struct {
	thread string
	last   string // the last agent message
	turns  int    // agent messages and tool calls seen
}

var _ Parser = (*CodexParser)(nil)

// codexRetry is Codex's word for a model call it will try again:
// "Reconnecting... 2/5 (unexpected status 429 Too Many Requests: ...)".
var codexRetry = regexp.MustCompile(`^Reconnecting\.\.\. (\d+)/(\d+)`)

// codexStatus finds the HTTP status in Codex's error text.
var codexStatus = regexp.MustCompile(`unexpected status (\d{3})\b`)

// ParseLine implements Parser.
func (p *CodexParser) ParseLine(line []byte) []Event {
	v, ok := jsonObject(line)
	if !ok {
		return nil
	}
	switch v.Get("type").String() {
	case "thread.started":
		p.thread = v.Get("thread_id").String()
		return []Event{{Init: &Init{SessionID: p.thread}}}
	case "item.started":
		return p.started(v.Get("item").Get("type").String(), v.Get("item"))
	case "item.completed":
		item := v.Get("item")
		if item.Get("type").String() == "agent_message" {
			p.last = item.Get("text").String()
			p.turns++
		}
		if t := item.Get("type").String(); t == "file_change" || t == "mcp_tool_call" {
			return p.started(t, item) // no item.started before these
		}
	case "error":
		msg := v.Get("message").String()
		if m := codexRetry.FindStringSubmatch(msg); m != nil {
			attempt, _ := strconv.Atoi(m[1])
			most, _ := strconv.Atoi(m[2])
			return []Event{{Retry: &APIRetry{Attempt: attempt, MaxRetries: most, Status: statusIn(msg), Error: msg}}}
		}
	case "turn.failed":
		msg := v.Get("error.message").String()
		return []Event{{Result: &Result{Text: msg, IsError: true, Subtype: "error", APIErrorStatus: statusIn(msg),
			SessionID: p.thread, Turns: p.turns}}}
	case "turn.completed":
		u := v.Get("usage")
		return []Event{{Result: &Result{Text: p.last, SessionID: p.thread, Turns: p.turns,
			Usage: openAIUsage(tokens(u.Get("input_tokens")), tokens(u.Get("cached_input_tokens")),
				tokens(u.Get("output_tokens")), tokens(u.Get("cache_write_input_tokens")))}}}
	}
	return nil
}

// openAIUsage is usage as OpenAI counts it, whose input tokens include the
// cached ones: those are counted as cache reads, the rest as input.
func openAIUsage(input, cached, output, cacheWrite int64) protocol.Usage {
	cached = min(cached, input)
	return protocol.Usage{Input: input - cached, CacheRead: cached, Output: output, CacheCreation: cacheWrite}
}

// started turns the start of a tool item into a ToolCall: a command as
// Bash with its command line, as Claude's, an MCP call as
// mcp__<server>__<tool>, a file change as apply_patch.
func (p *CodexParser) started(typ string, item gjson.Result) []Event {
	var call ToolCall
	switch typ {
	case "command_execution":
		in, _ := json.Marshal(map[string]string{"command": item.Get("command").String()})
		call = ToolCall{Name: "Bash", Input: in}
	case "mcp_tool_call":
		call = ToolCall{Name: "mcp__" + item.Get("server").String() + "__" + item.Get("tool").String(), Input: rawOr(item.Get("arguments").Raw)}
	case "file_change":
		call = ToolCall{Name: "apply_patch", Input: rawOr(item.Get("changes").Raw)}
	default:
		return nil
	}
	p.turns++
	return []Event{{ToolCall: &call}}
}

func rawOr(raw string) json.RawMessage {
	if raw == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(raw)
}

// statusIn reads the HTTP status of Codex's error text; 0 when none.
func statusIn(msg string) int {
	m := codexStatus.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// OpenAI's Codex CLI's adapter: one `codex exec --json` process per task,
// the prompt on stdin; `codex exec resume <thread>` continues a session.
// A long-lived worker's persistent process (AGENT_PERSISTENT) is `codex
// app-server`, Codex's own JSON-RPC server (CodexAppServer): a task is a
// turn of the project's thread, a cancel interrupts the turn, and its
// approval requests carry ALLOWED_COMMANDS and AGENT_APPROVAL. The
// app-server rather than ACP: Codex speaks ACP only through Zed's
// adapter, codex-acp, a separate program and package with releases of its
// own, where the app-server ships in the same binary and gives the
// turn's usage, interrupts, and approvals of commands, patches and MCP
// tool calls.
//
// The model API: Setup declares in ~/.codex/config.toml a model provider,
// agentvisor, at the wrapper's proxy (the Responses API, wire_api
// "responses"), whose key Codex reads from AGENTVISOR_MODEL_TOKEN: the
// proxy's token, never the real key. The proxy forwards to
// OPENAI_BASE_URL (default https://api.openai.com) with OPENAI_API_KEY.
//
// Sandbox and approvals: a worker's container is the sandbox:
// sandbox_mode danger-full-access. Nobody answers in a headless run:
// approval_policy never, on the command line; the app-server's thread
// asks the wrapper under an ALLOWED_COMMANDS list (CodexAppServer).
// Codex hides variables whose names hold KEY, SECRET or TOKEN from its
// commands by default; the progress call needs WORKER_PROGRESS_TOKEN, so
// its shell environment inherits everything (the wrapper already left its
// secrets out). Its commands run in a login shell by default, whose
// /etc/profile resets PATH and so loses worker-wrapper's directory:
// allow_login_shell=false.
//
// ALLOWED_COMMANDS in a process per task: Codex's own rules (execpolicy)
// cannot say "refuse everything else" without asking; as for Droid, a
// PreToolUse hook on Bash (Codex's name for its shell tools in hooks)
// runs `worker-wrapper guard`, given with -c (a flag, not a file the agent
// could edit), and --dangerously-bypass-hook-trust runs it without a
// trust prompt. In the app-server, which runs no such hook, the wrapper
// answers Codex's approval requests.
//
// MCP servers: mcp_servers tables in config.toml, each required (Codex
// does not start without it, and says which on stderr: CheckOutcome) and
// given AGENT_MCP_TIMEOUT to start. Codex offers a server's tools in a
// namespace, mcp__<server>, and reports a call as an mcp_tool_call item.
// An app-server refuses the thread without one: the task then runs in a
// process of its own, whose refusal fails it MCP_UNAVAILABLE.
//
// Not supported: AGENT_APPROVAL in a process per task (nobody can answer
// `codex exec`), a JSON schema for the stop output.
type codex struct{ s Settings }

func init() { register(protocol.AgentCodex, func(s Settings) Adapter { return codex{s} }) }

// codexProvider is the model provider Setup declares; codexTokenEnv the
// variable its key is read from.
const (
	codexProvider = "agentvisor"
	codexTokenEnv = "AGENTVISOR_MODEL_TOKEN"
	// DefaultOpenAIUpstream is where the proxy forwards Codex's calls
	// without OPENAI_BASE_URL.
	DefaultOpenAIUpstream = "https://api.openai.com"
)

// codexDocMaxBytes is how much of AGENTS.md (INSTRUCTIONS) Codex reads:
// its default, 32 KiB, cuts a spec's instructions (up to
// protocol.MaxInstructionsBytes) short.
const codexDocMaxBytes = 1 << 20

func (codex) Type() protocol.AgentType { return protocol.AgentCodex }
func (codex) Name() string             { return "Codex" }

func (codex) Caps() Capabilities { return Capabilities{Approvals: true, OpensSession: true} }

// Argv is `codex exec --json` (or `codex exec resume ... <thread>`) with
// the prompt read from stdin ("-"; on a pty, in argv).
func (c codex) Argv(inv Invocation) []string {
	argv := []string{c.s.Bin, "exec"}
	if inv.ResumeID != "" {
		argv = append(argv, "resume")
	}
	argv = append(argv, "--json", "--skip-git-repo-check")
	argv = append(argv, c.settings(inv)...)
	argv = append(argv, c.guardArgs()...)
	if c.s.Model != "" {
		argv = append(argv, "-m", c.s.Model)
	}
	argv = append(argv, c.s.Args...)
	if inv.ResumeID != "" {
		argv = append(argv, inv.ResumeID)
	}
	if c.s.PTY {
		return append(argv, inv.Prompt)
	}
	return append(argv, "-")
}

// settings are the -c settings of both modes: see codex.
func (c codex) settings(inv Invocation) []string {
	return []string{"-c", `approval_policy="never"`, "-c", `sandbox_mode="danger-full-access"`,
		"-c", `shell_environment_policy.inherit="all"`, "-c", "shell_environment_policy.ignore_default_excludes=true",
		"-c", "allow_login_shell=false", "-c", "check_for_update_on_startup=false",
		"-c", "project_doc_max_bytes=" + strconv.Itoa(codexDocMaxBytes),
		"-c", "developer_instructions=" + tomlString(c.s.systemPrompt(inv))}
}

// tomlString quotes s as a TOML basic string: JSON's escapes are TOML's.
func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// guardArgs give Codex the PreToolUse hook that asks the wrapper about
// each shell command, when ALLOWED_COMMANDS is a list.
func (c codex) guardArgs() []string {
	if c.s.AllowedCommands.ShellRules().All {
		return nil
	}
	hook := "hooks.PreToolUse=[{matcher=\"Bash\",hooks=[{type=\"command\",command=" + tomlString(shellQuote(c.s.SelfPath)+" guard") + "}]}]"
	return []string{"--dangerously-bypass-hook-trust", "-c", hook}
}

func (c codex) Stdin(inv Invocation) []byte { return c.s.stdin(inv) }

// PersistentArgv is `codex app-server` on stdio with the settings of a
// process per task, its model a setting too (the app-server takes no -m);
// no hook: the thread's approval requests are answered instead
// (CodexAppServer). The thread is opened on stdin (Input).
func (c codex) PersistentArgv(inv Invocation) []string {
	argv := append([]string{c.s.Bin, "app-server"}, c.settings(inv)...)
	if c.s.Model != "" {
		argv = append(argv, "-c", "model="+tomlString(c.s.Model))
	}
	return append(argv, c.s.Args...)
}

func (codex) Parser() Parser { return &CodexParser{} }

// Input is one CodexAppServer, dialect and parser, for the thread
// inv.ResumeID ("": a new one).
func (c codex) Input(inv Invocation) (Dialect, Parser) {
	rpc := NewCodexAppServer(CodexSession{Cwd: c.s.dir(inv), Allowed: c.s.AllowedCommands, Approval: c.s.Approval}, inv.ResumeID)
	return rpc, rpc
}

// WithContext puts the project's context in the developer instructions.
func (codex) WithContext(inv Invocation, section string) Invocation {
	inv.Extra = section
	return inv
}

// Route: Codex goes through the proxy to OpenAI's API (openAIRoute).
func (codex) Route(getenv func(string) string) ModelRoute { return openAIRoute(getenv) }

// openAIRoute is the route of an agent of OpenAI's APIs: through the
// proxy, to OPENAI_BASE_URL (without a trailing /v1, which the agent's
// requests carry) or the OpenAI API, with OPENAI_API_KEY as the bearer
// token.
func openAIRoute(getenv func(string) string) ModelRoute {
	up := strings.TrimSuffix(strings.TrimSuffix(getenv("OPENAI_BASE_URL"), "/"), "/v1")
	if up == "" {
		up = DefaultOpenAIUpstream
	}
	return ModelRoute{Proxied: true, Upstream: up, Credential: &Credential{AuthToken: getenv("OPENAI_API_KEY")}}
}

// Env gives Codex the proxy's token, under the name its provider reads.
func (codex) Env(api ModelAPI) []string {
	if api.URL == "" {
		return nil
	}
	return []string{codexTokenEnv + "=" + api.Token}
}

func (codex) KeepsEnv(string) bool     { return false }
func (codex) InstructionsFile() string { return "AGENTS.md" }

// Setup writes ~/.codex/config.toml with the agentvisor model provider at
// the proxy and the spec's MCP servers (replacing what an earlier worker
// on the same HOME wrote): a file, as the servers' env and headers are
// secrets that a command line would show to any process.
func (c codex) Setup(home string, api ModelAPI) error {
	if !c.s.AllowedCommands.ShellRules().All && c.s.SelfPath == "" {
		return fmt.Errorf("codex guard: the wrapper's own path is unknown, so ALLOWED_COMMANDS cannot be enforced (set ALLOWED_COMMANDS=* to run without it)")
	}
	if api.URL == "" && len(c.s.MCPServers) == 0 {
		return nil
	}
	if home == "" {
		return fmt.Errorf("codex config: HOME is not set")
	}
	dir := filepath.Join(home, ".codex")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("codex config: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "config.toml"), []byte(c.config(api.URL)), 0o600)
}

// config is the config.toml that points Codex at the proxy (when there
// is one) and gives it the spec's MCP servers.
func (c codex) config(proxyURL string) string {
	var b strings.Builder
	b.WriteString("# Written by the agentvisor wrapper at its start: the model API goes through its proxy.\n")
	if proxyURL != "" {
		b.WriteString("model_provider = " + tomlString(codexProvider) + "\n\n" +
			"[model_providers." + codexProvider + "]\n" +
			"name = " + tomlString(codexProvider) + "\n" +
			"base_url = " + tomlString(strings.TrimSuffix(proxyURL, "/")+"/v1") + "\n" +
			"wire_api = \"responses\"\n" +
			"env_key = " + tomlString(codexTokenEnv) + "\n")
	}
	for _, m := range c.s.MCPServers {
		b.WriteString("\n" + c.mcpServer(m))
	}
	return b.String()
}

// mcpServer is one MCP server's table: required, so that Codex refuses to
// start without it (CheckOutcome), and given AGENT_MCP_TIMEOUT to start.
func (c codex) mcpServer(m protocol.MCPServer) string {
	var b strings.Builder
	b.WriteString("[mcp_servers." + tomlString(m.Name) + "]\n")
	if m.URL != "" {
		b.WriteString("url = " + tomlString(m.URL) + "\n")
		if len(m.Headers) > 0 {
			b.WriteString("http_headers = " + tomlTable(m.Headers) + "\n")
		}
	} else {
		b.WriteString("command = " + tomlString(m.Command) + "\n")
		args := make([]string, len(m.Args))
		for i, a := range m.Args {
			args[i] = tomlString(a)
		}
		b.WriteString("args = [" + strings.Join(args, ", ") + "]\n")
		if len(m.Env) > 0 {
			b.WriteString("env = " + tomlTable(m.Env) + "\n")
		}
	}
	secs := max(int64(c.s.MCPTimeout.Seconds()), 1)
	b.WriteString("required = true\nstartup_timeout_sec = " + strconv.FormatInt(secs, 10) + "\n")
	return b.String()
}

// tomlTable is m as an inline TOML table, its keys quoted, in key order.
func tomlTable(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = tomlString(k) + " = " + tomlString(m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// CheckInit: nothing to check; Codex does not start without a required
// server (CheckOutcome).
func (codex) CheckInit(Event) *protocol.Error { return nil }

// codexMCPRefusal is what Codex prints when a required MCP server did not
// start or connect in time; the servers it names follow.
const codexMCPRefusal = "required MCP servers failed to initialize"

// CheckOutcome turns Codex's refusal to start without a server of the
// spec (no thread, no result, codexMCPRefusal on stderr) into an abort
// with MCP_UNAVAILABLE, naming what Codex said of the server.
func (c codex) CheckOutcome(o Outcome) Outcome {
	if len(c.s.MCPServers) == 0 || o.Aborted != nil || o.Init != nil || o.Result != nil || o.StartErr != nil {
		return o
	}
	i := strings.Index(o.Stderr, codexMCPRefusal)
	if i < 0 {
		return o
	}
	said := o.Stderr[i+len(codexMCPRefusal):]
	if j := strings.IndexByte(said, '\n'); j >= 0 {
		said = said[:j]
	}
	said = strings.TrimSpace(strings.TrimPrefix(said, ":"))
	o.Aborted = protocol.NewError(protocol.CodeMCPUnavailable, "MCP server not available: Codex would not start without it (waited up to %s): %s",
		c.s.MCPTimeout, truncate(said, 500))
	return o
}

// Model: Codex names no model in its output; the configured one.
func (c codex) Model(init *Init) string {
	if init != nil && init.Model != "" {
		return init.Model
	}
	return c.s.Model
}
