package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// ClaudeParser parses `claude -p --output-format stream-json --verbose`.
type ClaudeParser struct{}

var _ Parser = ClaudeParser{}

// maxTokens bounds a token count an agent reports: far above any real
// count, low enough that the sums the wrapper makes of many cannot
// overflow.
const maxTokens = 1 << 40

// tokens reads a token count an agent printed. The agent's output is not
// trusted: a negative count is 0, a huge one maxTokens, so that no output
// fails to validate for the agent's arithmetic.
func tokens(v gjson.Result) int64 {
	n := v.Int()
	if v.Type == gjson.Number && v.Num > maxTokens {
		n = maxTokens
	}
	return min(max(n, 0), maxTokens)
}

func claudeUsage(u gjson.Result) protocol.Usage {
	return protocol.Usage{
		Input:         tokens(u.Get("input_tokens")),
		Output:        tokens(u.Get("output_tokens")),
		CacheRead:     tokens(u.Get("cache_read_input_tokens")),
		CacheCreation: tokens(u.Get("cache_creation_input_tokens")),
	}
}

// jsonObject parses a line that is one JSON object; ok is false for
// anything else (not JSON, an array, a bare value).
func jsonObject(line []byte) (gjson.Result, bool) {
	if !gjson.ValidBytes(line) {
		return gjson.Result{}, false
	}
	v := gjson.ParseBytes(line)
	return v, v.IsObject()
}

// ParseLine implements Parser.
func (ClaudeParser) ParseLine(line []byte) []Event {
	v, ok := jsonObject(line)
	if !ok {
		return nil
	}
	switch v.Get("type").String() {
	case "control_response":
		r := v.Get("response")
		return []Event{{Control: &ControlResponse{RequestID: r.Get("request_id").String(), Subtype: r.Get("subtype").String(),
			Error: r.Get("error").String()}}}
	case "system":
		switch v.Get("subtype").String() {
		case "init":
			in := &Init{SessionID: v.Get("session_id").String(), Model: v.Get("model").String()}
			v.Get("mcp_servers").ForEach(func(_, m gjson.Result) bool {
				in.MCPServers = append(in.MCPServers, MCPServerStatus{Name: m.Get("name").String(), Status: m.Get("status").String()})
				return true
			})
			return []Event{{Init: in}}
		case "api_retry":
			return []Event{{Retry: &APIRetry{
				Attempt:    int(v.Get("attempt").Int()),
				MaxRetries: int(v.Get("max_retries").Int()),
				DelayMS:    v.Get("retry_delay_ms").Float(),
				Status:     int(v.Get("error_status").Int()),
				Error:      v.Get("error").String(),
			}}}
		}
	case "control_request":
		if r := v.Get("request"); r.Get("subtype").String() == "can_use_tool" {
			return []Event{{Permission: &PermissionAsk{ID: v.Get("request_id").String(), Tool: r.Get("tool_name").String(),
				Input: json.RawMessage(r.Get("input").Raw)}}}
		}
	case "user":
		if v.Get("isReplay").Bool() {
			return []Event{{Replay: true}}
		}
	case "assistant":
		msg := v.Get("message")
		var evs []Event
		// A "<synthetic>" message is Claude Code's own (an error shown as a
		// reply): it made no API call, and its zero usage is no context.
		if u := msg.Get("usage"); u.Exists() && msg.Get("model").String() != "<synthetic>" {
			evs = append(evs, Event{Turn: &Turn{MessageID: msg.Get("id").String(), Usage: claudeUsage(u)}})
		}
		if kind := v.Get("error").String(); kind != "" {
			evs = append(evs, Event{APIError: &APIError{Kind: kind}})
		}
		msg.Get("content").ForEach(func(_, c gjson.Result) bool {
			if c.Get("type").String() == "tool_use" {
				evs = append(evs, Event{ToolCall: &ToolCall{Name: c.Get("name").String(), Input: json.RawMessage(c.Get("input").Raw)}})
			}
			return true
		})
		return evs
	case "result":
		r := &Result{
			Text:           v.Get("result").String(),
			IsError:        v.Get("is_error").Bool(),
			Subtype:        v.Get("subtype").String(),
			APIErrorStatus: int(v.Get("api_error_status").Int()),
			Usage:          claudeUsage(v.Get("usage")),
			CostUSD:        v.Get("total_cost_usd").Float(),
			Turns:          int(v.Get("num_turns").Int()),
			SessionID:      v.Get("session_id").String(),
			DurationMS:     v.Get("duration_ms").Int(),
		}
		if so := v.Get("structured_output"); so.Exists() && so.Type != gjson.Null {
			r.StructuredOutput = json.RawMessage(so.Raw)
		}
		v.Get("modelUsage").ForEach(func(_, m gjson.Result) bool {
			if w := m.Get("contextWindow").Int(); w > r.ContextWindow {
				r.ContextWindow = w
			}
			return true
		})
		evs := []Event{{Result: r}}
		v.Get("permission_denials").ForEach(func(_, d gjson.Result) bool {
			evs = append(evs, Event{Denied: &Denial{Tool: d.Get("tool_name").String(), Input: json.RawMessage(d.Get("tool_input").Raw)}})
			return true
		})
		return evs
	}
	return nil
}

// Claude Code's adapter.
//
// ALLOWED_COMMANDS: --permission-mode dontAsk (what no rule allows is
// denied, never asked) and --allowedTools with Edit, Write and one
// Bash(<words>:*) rule per prefix; "*" keeps --dangerously-skip-permissions.
// Claude splits compound commands and checks each part, refuses command
// substitution, and reports what it refused in its result line
// (permission_denials), which the wrapper publishes as warnings.
//
// MCP servers (Claude Code 2.1.197): a config file given with --mcp-config
// and --strict-mcp-config (no other MCP configuration counts: not the
// user's, not a .mcp.json in the workspace). By default Claude does not
// wait for its servers before the first turn (a slow one shows "pending"
// on the init line); MCP_CONNECTION_NONBLOCKING=0 makes it wait, up to
// MCP_CONNECT_TIMEOUT_MS, and MCP_TIMEOUT bounds a server's start: both
// are AGENT_MCP_TIMEOUT. Its init line then gives each server's status;
// any but "connected" is a server the task would have to do without.
type claude struct{ s Settings }

func init() { register(protocol.AgentClaude, func(s Settings) Adapter { return claude{s} }) }

// claudeFileTools are the Claude tools a worker may always use: editing
// files is its job (reading needs no permission).
var claudeFileTools = []string{"Edit", "Write", "NotebookEdit"}

func (claude) Type() protocol.AgentType { return protocol.AgentClaude }
func (claude) Name() string             { return "Claude" }

func (claude) Caps() Capabilities {
	return Capabilities{ReportsCost: true, BudgetFlag: true, Approvals: true, JSONSchema: true}
}

// Argv is `claude -p` with the prompt on stdin (on a pty, in argv).
func (c claude) Argv(inv Invocation) []string {
	argv := []string{c.s.Bin, "-p"}
	if c.s.PTY {
		argv = append(argv, inv.Prompt)
	}
	argv = append(argv, "--output-format", "stream-json", "--verbose")
	argv = append(argv, c.permissionArgs()...)
	argv = append(argv, c.mcpArgs()...)
	if inv.ResumeID != "" {
		argv = append(argv, "--resume", inv.ResumeID)
	}
	if c.s.Model != "" {
		argv = append(argv, "--model", c.s.Model)
	}
	if inv.MaxBudgetUSD > 0 {
		argv = append(argv, "--max-budget-usd", strconv.FormatFloat(inv.MaxBudgetUSD, 'f', -1, 64))
	}
	argv = append(argv, "--append-system-prompt", c.s.systemPrompt(inv))
	if c.s.JSONSchema {
		argv = append(argv, "--json-schema", protocol.StopOutputSchema())
	}
	return append(argv, c.s.Args...)
}

func (c claude) Stdin(inv Invocation) []byte { return c.s.stdin(inv) }

// PersistentArgv is Argv with stream-json input. --replay-user-messages:
// Claude echoes each message it takes, so that a steering message answered
// in a turn of its own is waited for. With AGENT_APPROVAL it asks instead
// of refusing: dontAsk becomes default, and the prompts come on the
// control channel.
func (c claude) PersistentArgv(inv Invocation) []string {
	argv := c.Argv(inv)
	out := append([]string{argv[0], "-p", "--input-format", "stream-json", "--replay-user-messages"}, argv[2:]...) // argv[1] is -p (never on a pty)
	if !c.s.Approval {
		return out
	}
	if i := slices.Index(out, "dontAsk"); i > 0 && out[i-1] == "--permission-mode" {
		out[i] = "default"
	}
	return append(out, "--permission-prompt-tool", "stdio")
}

func (claude) Parser() Parser { return ClaudeParser{} }

// Input is Claude's stream-json input; its session is on the command line.
func (claude) Input(Invocation) (Dialect, Parser) { return ClaudeInput{Replay: true}, ClaudeParser{} }

// WithContext puts the project's context in the system prompt.
func (claude) WithContext(inv Invocation, section string) Invocation {
	inv.Extra = section
	return inv
}

// Route: Claude goes through the proxy, to ANTHROPIC_BASE_URL (default
// the Anthropic API).
func (claude) Route(getenv func(string) string) ModelRoute {
	return ModelRoute{Proxied: true, Upstream: getenv("ANTHROPIC_BASE_URL")}
}

// Env gives Claude the proxy as its API, makes it wait for its MCP
// servers (at most MCPTimeout, so that its init line says whether each
// connected), and turns off what a worker has no use for. Claude refuses
// to skip permissions as root outside a sandbox; a worker container is
// that sandbox.
func (c claude) Env(api ModelAPI) []string {
	var env []string
	if api.URL != "" {
		env = append(env, "ANTHROPIC_BASE_URL="+api.URL, "ANTHROPIC_API_KEY="+api.Token)
	}
	if len(c.s.MCPServers) > 0 {
		ms := strconv.FormatInt(c.s.MCPTimeout.Milliseconds(), 10)
		env = append(env, "MCP_CONNECTION_NONBLOCKING=0", "MCP_CONNECT_TIMEOUT_MS="+ms, "MCP_TIMEOUT="+ms)
	}
	if os.Geteuid() == 0 {
		env = append(env, "IS_SANDBOX=1")
	}
	return append(env, "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1")
}

func (claude) KeepsEnv(string) bool     { return false }
func (claude) InstructionsFile() string { return "CLAUDE.md" }

// Setup writes the --mcp-config file when the spec names servers.
func (c claude) Setup(string, ModelAPI) error {
	if len(c.s.MCPServers) == 0 {
		return nil
	}
	return writeReadOnly(c.mcpConfigPath(), mcpDocument(c.s.MCPServers), "mcp servers")
}

// mcpConfigPath is the --mcp-config file.
func (c claude) mcpConfigPath() string { return filepath.Join(c.s.RuntimeDir, "mcp.json") }

// mcpArgs are Claude's MCP flags.
func (c claude) mcpArgs() []string {
	if len(c.s.MCPServers) == 0 {
		return nil
	}
	return []string{"--mcp-config", c.mcpConfigPath(), "--strict-mcp-config"}
}

// permissionArgs are Claude's permission flags for ALLOWED_COMMANDS.
func (c claude) permissionArgs() []string {
	rules := c.s.AllowedCommands.ShellRules()
	switch {
	case rules.All && c.s.SkipPermissions:
		return []string{"--dangerously-skip-permissions"}
	case rules.All:
		tools := append(slices.Clone(claudeFileTools), "Bash")
		return []string{"--permission-mode", "dontAsk", "--allowedTools=" + strings.Join(append(tools, c.mcpAllowedTools()...), ",")}
	}
	return []string{"--permission-mode", "dontAsk", "--allowedTools=" + strings.Join(append(ClaudeAllowedTools(rules), c.mcpAllowedTools()...), ",")}
}

// ClaudeAllowedTools is Claude's --allowedTools list for rules.
func ClaudeAllowedTools(rules protocol.ShellRules) []string {
	tools := append([]string(nil), claudeFileTools...)
	for _, p := range rules.Prefixes {
		tools = append(tools, "Bash("+strings.Join(p, " ")+":*)")
	}
	return tools
}

// mcpAllowedTools are permission rules that allow every tool of the
// spec's servers: a list in ALLOWED_COMMANDS runs Claude in dontAsk mode,
// where a tool no rule allows is denied. The spec's author chose the
// servers; ALLOWED_COMMANDS governs shell commands.
func (c claude) mcpAllowedTools() []string {
	var rules []string
	for _, s := range c.s.MCPServers {
		rules = append(rules, "mcp__"+s.Name)
	}
	return rules
}

// CheckInit: every server of the spec is on the init line, connected.
func (c claude) CheckInit(ev Event) *protocol.Error {
	if ev.Init == nil || len(c.s.MCPServers) == 0 {
		return nil
	}
	status := map[string]string{}
	for _, m := range ev.Init.MCPServers {
		status[m.Name] = m.Status
	}
	var missing []string
	for _, s := range c.s.MCPServers {
		switch st, ok := status[s.Name]; {
		case !ok:
			missing = append(missing, s.Name+" (not reported)")
		case st != "connected":
			missing = append(missing, s.Name+" ("+st+")")
		}
	}
	return mcpMissing(missing, c.s.MCPTimeout)
}

func (claude) CheckOutcome(o Outcome) Outcome { return o }

func (c claude) Model(init *Init) string {
	if init != nil && init.Model != "" {
		return init.Model
	}
	return c.s.Model
}
