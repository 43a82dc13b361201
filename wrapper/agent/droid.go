package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// DroidParser parses `droid exec -o stream-json`.
//
// Droid reports usage only on its completion line, summed over the run; it
// gives no per-call usage, so a Droid run yields no Turn events and the
// runner falls back to the summed figures for the context size (an upper
// bound, which errs towards starting a new session early).
type DroidParser struct{}

var _ Parser = DroidParser{}

// ParseLine implements Parser.
func (DroidParser) ParseLine(line []byte) []Event {
	v, ok := jsonObject(line)
	if !ok {
		return nil
	}
	switch v.Get("type").String() {
	case "system":
		if v.Get("subtype").String() == "init" {
			in := &Init{SessionID: v.Get("session_id").String(), Model: v.Get("model").String()}
			v.Get("tools").ForEach(func(_, t gjson.Result) bool {
				in.Tools = append(in.Tools, t.String())
				return true
			})
			return []Event{{Init: in}}
		}
	case "tool_call":
		return []Event{{ToolCall: &ToolCall{Name: v.Get("toolName").String(), Input: json.RawMessage(v.Get("parameters").Raw)}}}
	case "completion":
		u := v.Get("usage")
		return []Event{{Result: &Result{
			Text: v.Get("finalText").String(),
			Usage: protocol.Usage{
				Input:         tokens(u.Get("input_tokens")),
				Output:        tokens(u.Get("output_tokens")),
				CacheRead:     tokens(u.Get("cache_read_input_tokens")),
				CacheCreation: tokens(u.Get("cache_creation_input_tokens")),
			},
			Turns:      int(v.Get("numTurns").Int()),
			SessionID:  v.Get("session_id").String(),
			DurationMS: v.Get("durationMs").Int(),
		}}}
	case "error":
		// Droid's error line: a failed run with no completion.
		msg := v.Get("message").String()
		if msg == "" {
			msg = v.Get("error").String()
		}
		return []Event{{Result: &Result{Text: msg, IsError: true, Subtype: "error",
			APIErrorStatus: leadingStatus(msg), SessionID: v.Get("session_id").String()}}}
	}
	return nil
}

// leadingStatus reads the HTTP status Droid puts first in an API error
// message ("401 {...}"); 0 when there is none.
func leadingStatus(msg string) int {
	if len(msg) < 4 || msg[3] != ' ' {
		return 0
	}
	n := 0
	for _, c := range msg[:3] {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	if n < 100 || n > 599 {
		return 0
	}
	return n
}

// Droid is the adapter of Factory's Droid (`droid exec`, stream-json per
// task; stream-jsonrpc for a persistent process).
//
// Permissions: Droid's autonomy levels trust the risk the model itself
// declares for a command, and its commandDenylist cannot say "everything
// else", so neither can enforce a list. Droid runs with
// --skip-permissions-unsafe and a PreToolUse hook on Execute (--settings)
// that runs `worker-wrapper guard`: the wrapper decides each command, and
// the hook's exit 2 refuses the call. "*" keeps --auto high (or
// --skip-permissions-unsafe).
//
// MCP servers: ~/.factory/mcp.json and --add-tools MCP:<server>,...:
// Droid then waits for every server, and one that offers no tool ends it
// before its init line with "Unknown tool identifier(s)" on stderr.
//
// Model: with a base URL (DROID_BASE_URL) a custom model is declared in
// ~/.factory/settings.json, at the wrapper's proxy; without, Droid talks
// to Factory's service with its own FACTORY_API_KEY.
type Droid struct{ s Setup }

var _ Adapter = Droid{}

// droidCustomModel is the name of the custom model declared for a base
// URL when AGENT_MODEL names none.
const droidCustomModel = "agentvisor"

// droidMCPRefusal is what Droid prints when a server named in --add-tools
// offers no tool (it did not start or connect).
const droidMCPRefusal = "Unknown tool identifier"

func (Droid) Type() protocol.AgentType { return protocol.AgentDroid }

// Caps: Droid reports no cost; it resumes sessions only through its
// vendor's cloud; it has no approval channel; its persistent process
// opens its session first, and its MCP check reads a one-shot run.
func (Droid) Caps() Caps { return Caps{EstimatesCost: true, OpensSession: true} }

func (d Droid) TaskArgv(inv Invocation) []string {
	s := d.s
	argv := []string{s.Bin, "exec", "-o", "stream-json", "--cwd", s.Workspace}
	argv = append(argv, d.permissionArgs()...)
	argv = append(argv, d.mcpArgs()...)
	if inv.ResumeID != "" {
		argv = append(argv, "--session-id", inv.ResumeID)
	}
	if m := d.model(); m != "" {
		argv = append(argv, "-m", m)
	}
	argv = append(argv, "--append-system-prompt", systemPrompt(inv))
	argv = append(argv, s.Args...)
	if s.PTY {
		return append(argv, inv.Prompt)
	}
	return append(argv, "-f", "/dev/stdin") // the prompt: see PromptStdin
}

// PromptStdin: Droid reads the prompt from -f /dev/stdin (on a pty it
// stays in argv).
func (d Droid) PromptStdin(inv Invocation) []byte {
	if d.s.PTY {
		return nil
	}
	return []byte(inv.Prompt)
}

// PersistentArgv is Droid's JSON-RPC mode: its session (new or resumed)
// is opened on stdin (PersistentInput), its prompts come as messages, so
// neither --session-id nor -f. The session's model and autonomy come in
// the opening request (the flags do not configure it); -m is still
// checked by Droid at start.
func (d Droid) PersistentArgv(inv Invocation) []string {
	argv := []string{d.s.Bin, "exec", "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc", "--cwd", d.s.Workspace}
	argv = append(argv, d.permissionArgs()...)
	if m := d.model(); m != "" {
		argv = append(argv, "-m", m)
	}
	argv = append(argv, "--append-system-prompt", systemPrompt(inv))
	return append(argv, d.s.Args...)
}

// PersistentInput is one DroidRPC, the dialect and the parser both.
func (d Droid) PersistentInput(resumeID string) (Dialect, Parser) {
	s := DroidSession{Cwd: d.s.Workspace, ModelID: d.model(), SkipPermissions: true}
	if d.s.Allowed.ShellRules().All && !d.s.SkipPermissions {
		s.SkipPermissions, s.AutonomyLevel = false, "high" // as --auto high
	}
	rpc := NewDroidRPC(s, resumeID)
	return rpc, rpc
}

func (Droid) Parser() Parser { return DroidParser{} }

// WithContext puts a project's context in the prompt, ahead of the task.
func (Droid) WithContext(inv Invocation, section string) Invocation {
	inv.Prompt = section + "\n\n# Task\n" + inv.Prompt
	return inv
}

// Env: Droid reads its custom model's URL and key from settings.json.
func (Droid) Env(ModelAPI) []string { return nil }

// Hidden: FACTORY_API_KEY reaches only a Droid that talks to Factory's own
// service (no base URL): that key is its login, which no proxy of ours
// stands in for.
func (d Droid) Hidden(name string) (bool, bool) {
	if name != "FACTORY_API_KEY" {
		return false, false
	}
	return d.s.BaseURL != "", true
}

// Prepare declares the custom model for a base URL in
// ~/.factory/settings.json (at the proxy with its token once it runs,
// else at the base URL with apiKey), writes the MCP servers to
// ~/.factory/mcp.json and the guard hook's settings.
func (d Droid) Prepare(home string, model ModelAPI, apiKey string) error {
	if err := d.writeSettings(home, model, apiKey); err != nil {
		return err
	}
	if err := d.writeMCP(home); err != nil {
		return err
	}
	return d.writeGuard()
}

func (d Droid) writeSettings(home string, model ModelAPI, apiKey string) error {
	if d.s.BaseURL == "" {
		return nil
	}
	if home == "" {
		return fmt.Errorf("droid settings: HOME is not set")
	}
	baseURL := d.s.BaseURL
	if model.URL != "" {
		baseURL, apiKey = model.URL, model.Token
	}
	if apiKey == "" {
		apiKey = "unused"
	}
	settings := map[string]any{"customModels": []map[string]any{{
		"model": d.customID(), "displayName": "agentvisor", "baseUrl": baseURL,
		"apiKey": apiKey, "provider": "anthropic", "maxOutputTokens": 8192,
	}}}
	b, _ := json.MarshalIndent(settings, "", "  ")
	dir := filepath.Join(home, ".factory")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("droid settings: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), b, 0o600); err != nil {
		return fmt.Errorf("droid settings: %w", err)
	}
	return nil
}

// writeMCP writes ~/.factory/mcp.json (replacing what an earlier worker on
// the same HOME left there) when the spec names servers. Without servers
// it writes nothing: outside a container HOME is a person's, whose own
// Droid servers are not ours to remove.
func (d Droid) writeMCP(home string) error {
	switch {
	case len(d.s.MCPServers) == 0:
		return nil
	case home == "":
		return fmt.Errorf("mcp servers: HOME is not set, so Droid's ~/.factory/mcp.json cannot be written")
	}
	dir := filepath.Join(home, ".factory")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("mcp servers: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mcp.json"), MCPDocument(d.s.MCPServers), 0o600); err != nil {
		return fmt.Errorf("mcp servers: %w", err)
	}
	return nil
}

// writeGuard writes the settings with the guard hook when the allowed
// commands need it. The file is read-only; an agent running as the
// wrapper's uid could still replace it, which only a separate uid for the
// agent prevents.
func (d Droid) writeGuard() error {
	if d.s.Allowed.ShellRules().All {
		return nil
	}
	if d.s.SelfPath == "" {
		return fmt.Errorf("droid guard: the wrapper's own path is unknown, so ALLOWED_COMMANDS cannot be enforced (set ALLOWED_COMMANDS=* to run without it)")
	}
	settings := map[string]any{"hooks": map[string]any{"PreToolUse": []any{map[string]any{
		"matcher": "Execute",
		"hooks":   []any{map[string]any{"type": "command", "command": shellQuote(d.s.SelfPath) + " guard"}},
	}}}}
	b, _ := json.MarshalIndent(settings, "", "  ")
	if err := writeReadOnly(d.s.GuardSettingsPath(), b); err != nil {
		return fmt.Errorf("droid guard: %w", err)
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (Droid) InstructionsFile() string { return "AGENTS.md" }

// ProxyUpstream: with a base URL the proxy forwards there; without, Droid
// talks to Factory itself.
func (d Droid) ProxyUpstream(func(string) string) (string, bool) {
	return d.s.BaseURL, d.s.BaseURL != ""
}

// APIModel: the custom model's id with a base URL, else AGENT_MODEL.
func (d Droid) APIModel() string {
	if d.s.BaseURL != "" {
		return d.customID()
	}
	return d.s.Model
}

// CheckInit: the init line lists the tools Droid offers, a server's as
// <server>___<tool>; a server none of whose tools is there is missing.
func (d Droid) CheckInit(ev Event) *protocol.Error {
	if ev.Init == nil || len(d.s.MCPServers) == 0 {
		return nil
	}
	var missing []string
	for _, s := range d.s.MCPServers {
		found := false
		for _, t := range ev.Init.Tools {
			if strings.HasPrefix(t, s.Name+"___") {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, s.Name+" (none of its tools offered at start)")
		}
	}
	return mcpUnavailable(missing, d.s.MCPTimeout)
}

// Outcome turns Droid's refusal to start without a server of the spec (no
// init line, no result, droidMCPRefusal on stderr) into an abort with
// MCP_UNAVAILABLE.
func (d Droid) Outcome(o Outcome) Outcome {
	if len(d.s.MCPServers) == 0 || o.Aborted != nil || o.Init != nil ||
		o.Result != nil || o.StartErr != nil || !strings.Contains(o.Stderr, droidMCPRefusal) {
		return o
	}
	o.Aborted = protocol.NewError(protocol.CodeMCPUnavailable, "MCP server not available: Droid would not start, as one of %s offered no tool (it did not start or connect): %s",
		serverNames(d.s.MCPServers), strings.TrimSpace(o.Stderr))
	return o
}

// model is the -m of Droid: the custom model with a base URL.
func (d Droid) model() string {
	if d.s.BaseURL != "" {
		return "custom:" + d.customID()
	}
	return d.s.Model
}

// customID is the model id of the custom model declared for the base URL:
// AGENT_MODEL (what the API there serves), or a name of our own.
func (d Droid) customID() string {
	if d.s.Model != "" {
		return d.s.Model
	}
	return droidCustomModel
}

// permissionArgs are Droid's permission flags for the allowed commands.
func (d Droid) permissionArgs() []string {
	switch all := d.s.Allowed.ShellRules().All; {
	case all && !d.s.SkipPermissions:
		return []string{"--auto", "high"}
	case all:
		return []string{"--skip-permissions-unsafe"}
	}
	return []string{"--skip-permissions-unsafe", "--settings", d.s.GuardSettingsPath()}
}

func (d Droid) mcpArgs() []string {
	if len(d.s.MCPServers) == 0 {
		return nil
	}
	sel := make([]string, len(d.s.MCPServers))
	for i, s := range d.s.MCPServers {
		sel[i] = "MCP:" + s.Name
	}
	return []string{"--add-tools", strings.Join(sel, ",")}
}
