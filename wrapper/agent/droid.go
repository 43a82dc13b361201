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
// gives no per-call usage, so a Droid run yields no Turn events: the
// wrapper takes the context size from its proxy's last metered call, or
// without a proxy from the summed figures (an upper bound, which errs
// towards starting a new session early).
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

// Factory Droid's adapter.
//
// ALLOWED_COMMANDS: Droid's autonomy levels trust the risk the model
// itself declares for a command, and its commandDenylist cannot say
// "everything else", so neither can enforce a list. Droid runs with
// --skip-permissions-unsafe and a PreToolUse hook on Execute (--settings)
// that runs `worker-wrapper guard`: the wrapper decides each command
// (protocol.AllowedCommands.AllowsShell), publishes a refusal as a
// warning, and the hook's exit 2 refuses the call. "*" keeps
// --skip-permissions-unsafe, or --auto high without AGENT_SKIP_PERMISSIONS.
//
// MCP servers (Droid 0.225.2): ~/.factory/mcp.json (what `droid mcp add`
// writes; a --settings file's mcpServers are ignored), and --add-tools
// MCP:<server>,... By default Droid starts its servers in the background
// and its first turn goes without those not yet connected; a tool
// selector makes it wait until every server has connected or failed, and
// a server that offers no tool then ends Droid before its init line, exit
// 1, "Unknown tool identifier(s)" on stderr (it does not say which). Its
// init line lists the tools it offers, a server's as <server>___<tool>; a
// server none of whose tools is listed there is missing too.
//
// Cost: Droid reports tokens, never dollars; the wrapper estimates its
// cost from the calls its proxy meters.
type droid struct{ s Settings }

func init() { register(protocol.AgentDroid, func(s Settings) Adapter { return droid{s} }) }

// droidCustomModel is the name of the custom model the wrapper declares in
// Droid's settings when DROID_BASE_URL is set and AGENT_MODEL is not.
const droidCustomModel = "agentvisor"

// droidMCPRefusal is what Droid prints when a server named in --add-tools
// offers no tool (it did not start or connect).
const droidMCPRefusal = "Unknown tool identifier"

func (droid) Type() protocol.AgentType { return protocol.AgentDroid }
func (droid) Name() string             { return "Droid" }

func (droid) Caps() Capabilities {
	return Capabilities{OpensSession: true, OneShotMCP: true,
		NoResume: "Droid resumes sessions only through its vendor's cloud, so no next turn can carry it"}
}

// Argv is `droid exec` with the prompt from -f /dev/stdin (on a pty, in
// argv).
func (d droid) Argv(inv Invocation) []string {
	argv := []string{d.s.Bin, "exec", "-o", "stream-json", "--cwd", d.s.dir(inv)}
	argv = append(argv, d.permissionArgs()...)
	argv = append(argv, d.mcpArgs()...)
	if inv.ResumeID != "" {
		argv = append(argv, "--session-id", inv.ResumeID)
	}
	if m := d.model(); m != "" {
		argv = append(argv, "-m", m)
	}
	argv = append(argv, "--append-system-prompt", d.s.systemPrompt(inv))
	argv = append(argv, d.s.Args...)
	if d.s.PTY {
		return append(argv, inv.Prompt)
	}
	return append(argv, "-f", "/dev/stdin")
}

func (d droid) Stdin(inv Invocation) []byte { return d.s.stdin(inv) }

// PersistentArgv is Droid's JSON-RPC mode, whose session (inv's to resume,
// or a new one) is opened on stdin (Input), and whose prompts come as
// messages: neither --session-id nor -f. The session's model and autonomy
// come in the opening request too (Droid's flags do not configure it); -m
// is still checked by Droid at start.
func (d droid) PersistentArgv(inv Invocation) []string {
	argv := []string{d.s.Bin, "exec", "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc", "--cwd", d.s.dir(inv)}
	argv = append(argv, d.permissionArgs()...)
	if m := d.model(); m != "" {
		argv = append(argv, "-m", m)
	}
	argv = append(argv, "--append-system-prompt", d.s.systemPrompt(inv))
	return append(argv, d.s.Args...)
}

func (droid) Parser() Parser { return DroidParser{} }

// Input is one DroidRPC, dialect and parser.
func (d droid) Input(inv Invocation) (Dialect, Parser) {
	s := DroidSession{Cwd: d.s.dir(inv), ModelID: d.model(), SkipPermissions: true}
	if d.s.AllowedCommands.ShellRules().All && !d.s.SkipPermissions {
		s.SkipPermissions, s.AutonomyLevel = false, "high" // as --auto high
	}
	rpc := NewDroidRPC(s, inv.ResumeID)
	return rpc, rpc
}

// WithContext puts the project's context in the prompt.
func (droid) WithContext(inv Invocation, section string) Invocation {
	inv.Prompt = section + "\n\n# Task\n" + inv.Prompt
	return inv
}

// Route: Droid's custom model (DROID_BASE_URL) goes through the proxy;
// without one Droid talks to Factory with its own FACTORY_API_KEY.
func (d droid) Route(func(string) string) ModelRoute {
	if d.s.BaseURL == "" {
		return ModelRoute{Direct: "this Droid talks to Factory's service (no DROID_BASE_URL)"}
	}
	return ModelRoute{Proxied: true, Upstream: d.s.BaseURL}
}

// Env: Droid reads its custom model's URL and key from settings.json.
func (droid) Env(ModelAPI) []string { return nil }

// KeepsEnv: FACTORY_API_KEY reaches a Droid that talks to Factory's own
// service (no DROID_BASE_URL): that key is its login, which no proxy of
// ours stands in for.
func (d droid) KeepsEnv(name string) bool { return name == "FACTORY_API_KEY" && d.s.BaseURL == "" }

func (droid) InstructionsFile() string { return "AGENTS.md" }

// Setup declares the custom model in ~/.factory/settings.json (with
// DROID_BASE_URL: at the proxy, else at DROID_BASE_URL), writes the guard
// hook's settings (ALLOWED_COMMANDS other than "*"), and the spec's MCP
// servers in ~/.factory/mcp.json (replacing whatever an earlier worker on
// the same HOME left there). Without servers it writes no mcp.json:
// outside a container HOME is a person's, whose own Droid servers are not
// ours to remove.
func (d droid) Setup(home string, api ModelAPI) error {
	if err := d.writeSettings(home, api); err != nil {
		return err
	}
	if err := d.writeGuard(); err != nil {
		return err
	}
	return d.writeMCP(home)
}

func (d droid) writeSettings(home string, api ModelAPI) error {
	if d.s.BaseURL == "" {
		return nil
	}
	if home == "" {
		return fmt.Errorf("droid settings: HOME is not set")
	}
	baseURL, apiKey := d.s.BaseURL, "unused"
	if api.URL != "" {
		baseURL, apiKey = api.URL, api.Token
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

// writeGuard writes Droid's runtime settings with the guard hook, when
// ALLOWED_COMMANDS needs it. The file is read-only; an agent running as
// the wrapper's uid could still replace it, which only a separate uid for
// the agent prevents.
func (d droid) writeGuard() error {
	if d.s.AllowedCommands.ShellRules().All {
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
	return writeReadOnly(d.guardSettingsPath(), b, "droid guard")
}

func (d droid) writeMCP(home string) error {
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
	if err := os.WriteFile(filepath.Join(dir, "mcp.json"), mcpDocument(d.s.MCPServers), 0o600); err != nil {
		return fmt.Errorf("mcp servers: %w", err)
	}
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// guardSettingsPath is the runtime settings file that gives Droid its
// PreToolUse hook.
func (d droid) guardSettingsPath() string { return filepath.Join(d.s.RuntimeDir, "droid-guard.json") }

// permissionArgs are Droid's permission flags for ALLOWED_COMMANDS.
func (d droid) permissionArgs() []string {
	switch rules := d.s.AllowedCommands.ShellRules(); {
	case rules.All && !d.s.SkipPermissions:
		return []string{"--auto", "high"}
	case rules.All:
		return []string{"--skip-permissions-unsafe"}
	}
	return []string{"--skip-permissions-unsafe", "--settings", d.guardSettingsPath()}
}

// mcpArgs select every tool of the spec's servers, so that Droid waits
// for them.
func (d droid) mcpArgs() []string {
	if len(d.s.MCPServers) == 0 {
		return nil
	}
	sel := make([]string, len(d.s.MCPServers))
	for i, s := range d.s.MCPServers {
		sel[i] = "MCP:" + s.Name
	}
	return []string{"--add-tools", strings.Join(sel, ",")}
}

// CheckInit: some tool of every server of the spec is on the init line.
func (d droid) CheckInit(ev Event) *protocol.Error {
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
	return mcpMissing(missing, d.s.MCPTimeout)
}

// CheckOutcome turns Droid's refusal to start without a server of the
// spec (no init line, no result, droidMCPRefusal on stderr) into an abort
// with MCP_UNAVAILABLE.
func (d droid) CheckOutcome(o Outcome) Outcome {
	if len(d.s.MCPServers) == 0 || o.Aborted != nil || o.Init != nil ||
		o.Result != nil || o.StartErr != nil || !strings.Contains(o.Stderr, droidMCPRefusal) {
		return o
	}
	names := make([]string, len(d.s.MCPServers))
	for i, s := range d.s.MCPServers {
		names[i] = s.Name
	}
	o.Aborted = protocol.NewError(protocol.CodeMCPUnavailable, "MCP server not available: Droid would not start, as one of %s offered no tool (it did not start or connect): %s",
		strings.Join(names, ", "), strings.TrimSpace(o.Stderr))
	return o
}

// Model: the model of the init line (a custom model's id without its
// custom: prefix), else the one the API is asked for.
func (d droid) Model(init *Init) string {
	if init != nil && init.Model != "" {
		return strings.TrimPrefix(init.Model, "custom:")
	}
	if d.s.BaseURL != "" {
		return d.customID()
	}
	return d.s.Model
}

// model is Droid's -m: the custom model for DROID_BASE_URL, else
// AGENT_MODEL.
func (d droid) model() string {
	if d.s.BaseURL != "" {
		return "custom:" + d.customID()
	}
	return d.s.Model
}

// customID is the model id of the custom model declared for
// DROID_BASE_URL: AGENT_MODEL (what the API at that URL serves, such as a
// real Anthropic model), or a name of our own for the stub.
func (d droid) customID() string {
	if d.s.Model != "" {
		return d.s.Model
	}
	return droidCustomModel
}
