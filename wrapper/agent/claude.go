package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// ClaudeParser parses `claude -p --output-format stream-json --verbose`.
type ClaudeParser struct{}

var _ Parser = ClaudeParser{}

func claudeUsage(u gjson.Result) protocol.Usage {
	return protocol.Usage{
		Input:         tokens(u.Get("input_tokens")),
		Output:        tokens(u.Get("output_tokens")),
		CacheRead:     tokens(u.Get("cache_read_input_tokens")),
		CacheCreation: tokens(u.Get("cache_creation_input_tokens")),
	}
}

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

// Claude is the adapter of Claude Code (`claude -p`, stream-json).
//
// Permissions (ALLOWED_COMMANDS): --permission-mode dontAsk (what no rule
// allows is denied, never asked) and --allowedTools with the file tools
// and one Bash(<words>:*) rule per prefix; Claude splits compound
// commands and checks each part, and reports what it refused in its
// result line. "*" keeps --dangerously-skip-permissions (or dontAsk with
// every Bash command). With approvals, the mode is default and Claude asks
// on its control channel (--permission-prompt-tool stdio).
//
// MCP servers: a config file given with --mcp-config and
// --strict-mcp-config; MCP_CONNECTION_NONBLOCKING=0 makes Claude wait for
// them (up to the MCP timeout), so that its init line gives each
// server's status.
type Claude struct{ s Setup }

var _ Adapter = Claude{}

// claudeFileTools are the Claude tools a worker may always use: editing
// files is its job (reading needs no permission).
var claudeFileTools = []string{"Edit", "Write", "NotebookEdit"}

func (Claude) Type() protocol.AgentType { return protocol.AgentClaude }

func (Claude) Caps() Caps {
	return Caps{BudgetFlag: true, ResumesLocally: true, Approvals: true, JSONSchema: true, PersistentMCP: true}
}

func (c Claude) TaskArgv(inv Invocation) []string {
	s := c.s
	argv := []string{s.Bin, "-p"}
	if s.PTY {
		argv = append(argv, inv.Prompt)
	}
	argv = append(argv, "--output-format", "stream-json", "--verbose")
	argv = append(argv, c.permissionArgs()...)
	argv = append(argv, c.mcpArgs()...)
	if inv.ResumeID != "" {
		argv = append(argv, "--resume", inv.ResumeID)
	}
	if s.Model != "" {
		argv = append(argv, "--model", s.Model)
	}
	if inv.MaxBudgetUSD > 0 {
		argv = append(argv, "--max-budget-usd", strconv.FormatFloat(inv.MaxBudgetUSD, 'f', -1, 64))
	}
	argv = append(argv, "--append-system-prompt", systemPrompt(inv))
	if s.JSONSchema {
		argv = append(argv, "--json-schema", protocol.StopOutputSchema())
	}
	return append(argv, s.Args...)
}

// PromptStdin: Claude -p reads the prompt on stdin, so that it never goes
// on the command line (one argument is limited to 128 KiB). On a pty
// stdin is the terminal: the prompt stays in argv.
func (c Claude) PromptStdin(inv Invocation) []byte {
	if c.s.PTY {
		return nil
	}
	return []byte(inv.Prompt)
}

// PersistentArgv is TaskArgv with stream-json input; with
// --replay-user-messages Claude echoes each message it takes, so that a
// steering message answered in a turn of its own is waited for.
func (c Claude) PersistentArgv(inv Invocation) []string {
	argv := c.TaskArgv(inv)
	out := []string{argv[0], "-p", "--input-format", "stream-json", "--replay-user-messages"}
	return c.approvalArgs(append(out, argv[2:]...)) // argv[1] is -p (never on a pty)
}

// approvalArgs makes Claude ask, on its control channel, for what its
// rules do not allow.
func (c Claude) approvalArgs(argv []string) []string {
	if !c.s.Approval {
		return argv
	}
	if i := slices.Index(argv, "dontAsk"); i > 0 && argv[i-1] == "--permission-mode" {
		argv[i] = "default"
	}
	return append(argv, "--permission-prompt-tool", "stdio")
}

// PersistentInput: Claude's session is on its command line; its input is
// stream-json (a nil dialect).
func (c Claude) PersistentInput(string) (Dialect, Parser) { return nil, ClaudeParser{} }

func (Claude) Parser() Parser { return ClaudeParser{} }

// WithContext puts a project's context in the system prompt.
func (Claude) WithContext(inv Invocation, section string) Invocation {
	inv.Extra = section
	return inv
}

func (c Claude) Env(model ModelAPI) []string {
	var env []string
	if model.URL != "" {
		env = append(env, "ANTHROPIC_BASE_URL="+model.URL, "ANTHROPIC_API_KEY="+model.Token)
	}
	if len(c.s.MCPServers) > 0 {
		ms := strconv.FormatInt(c.s.MCPTimeout.Milliseconds(), 10)
		env = append(env, "MCP_CONNECTION_NONBLOCKING=0", "MCP_CONNECT_TIMEOUT_MS="+ms, "MCP_TIMEOUT="+ms)
	}
	// Claude refuses to skip permissions as root outside a sandbox; a
	// worker container is that sandbox.
	if os.Geteuid() == 0 {
		env = append(env, "IS_SANDBOX=1")
	}
	return append(env, "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1")
}

// Hidden: a Factory key is no credential of Claude's.
func (Claude) Hidden(name string) (bool, bool) {
	return name == "FACTORY_API_KEY", name == "FACTORY_API_KEY"
}

// Prepare writes Claude's --mcp-config file when the spec names servers.
func (c Claude) Prepare(string, ModelAPI, string) error {
	if len(c.s.MCPServers) == 0 {
		return nil
	}
	if err := writeReadOnly(c.s.MCPConfigPath(), MCPDocument(c.s.MCPServers)); err != nil {
		return fmt.Errorf("mcp servers: %w", err)
	}
	return nil
}

func (Claude) InstructionsFile() string { return "CLAUDE.md" }

// ProxyUpstream: the model proxy always runs, forwarding to
// ANTHROPIC_BASE_URL ("" is the proxy's default, the Anthropic API).
func (Claude) ProxyUpstream(getenv func(string) string) (string, bool) {
	return getenv("ANTHROPIC_BASE_URL"), true
}

func (c Claude) APIModel() string { return c.s.Model }

// CheckInit: every server of the spec is on the init line, connected.
func (c Claude) CheckInit(ev Event) *protocol.Error {
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
	return mcpUnavailable(missing, c.s.MCPTimeout)
}

func (Claude) Outcome(o Outcome) Outcome { return o }

// permissionArgs are Claude's permission flags for the allowed commands.
func (c Claude) permissionArgs() []string {
	rules := c.s.Allowed.ShellRules()
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

// mcpAllowedTools allow every tool of the spec's servers: a list in
// ALLOWED_COMMANDS runs Claude in dontAsk mode, where a tool no rule
// allows is denied. The spec's author chose the servers; ALLOWED_COMMANDS
// governs shell commands.
func (c Claude) mcpAllowedTools() []string {
	var rules []string
	for _, s := range c.s.MCPServers {
		rules = append(rules, "mcp__"+s.Name)
	}
	return rules
}

func (c Claude) mcpArgs() []string {
	if len(c.s.MCPServers) == 0 {
		return nil
	}
	return []string{"--mcp-config", c.s.MCPConfigPath(), "--strict-mcp-config"}
}
