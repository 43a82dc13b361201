package agent

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// Qwen Code's adapter (npm @qwen-code/qwen-code, 0.24.4, a Node.js
// program): `qwen --acp`, an ACP agent (acp.go, ACPClient) that the
// wrapper configures. ACP rather than its headless `qwen -p -o
// stream-json`, for what ACP gives OpenCode too: a session to load
// (session/load), a turn to cancel with the process kept
// (session/cancel), permission requests to answer, and one process across
// a worker's tasks.
//
// The command line and a settings file in RuntimeDir, which
// QWEN_CODE_SYSTEM_SETTINGS_PATH names (system settings: they override
// the user's ~/.qwen and the workspace's .qwen/settings.json, which the
// agent could edit), configure it:
//   - the model API: OpenAI's Chat Completions (--auth-type openai) at the
//     wrapper's proxy: OPENAI_BASE_URL is the proxy, OPENAI_API_KEY its
//     token, never the real key. The proxy forwards to OPENAI_BASE_URL
//     with OPENAI_API_KEY of the wrapper's environment, as for Codex;
//   - the model: AGENT_MODEL (--model), else Qwen Code's default;
//   - the system prompt: the wrapper's section (--append-system-prompt);
//   - ALLOWED_COMMANDS: Qwen Code ends its turn when a permission request
//     is rejected, so a list is enforced as for Codex and Droid: approval
//     mode yolo, and a PreToolUse hook on its shell tools
//     (run_shell_command, monitor) that runs `worker-wrapper guard`; the
//     model is told of a refusal and goes on. "*" is yolo with no hook.
//     With AGENT_APPROVAL: approval mode auto-edit with every shell
//     command an "ask" rule (permissions.ask Bash: Qwen Code would
//     otherwise run a command it judges read-only without asking), so
//     each is a session/request_permission the wrapper decides, asking
//     the owner about what the list refuses; an owner's denial ends the
//     turn.
//   - usage statistics, telemetry and its update check off (they would
//     reach Qwen's services from inside a worker); so are the background
//     work that costs model calls of its own after or within a turn (its
//     memory extraction and consolidation, follow-up suggestions, the
//     next-speaker and loop checks): a task's usage is its turn's calls;
//   - chat recording on: session/load reads it (~/.qwen).
type qwen struct{ acp }

func init() {
	register(protocol.AgentQwen, func(s Settings) Adapter { return qwen{acp{s: s}} })
}

func (qwen) Type() protocol.AgentType { return protocol.AgentQwen }
func (qwen) Name() string             { return "Qwen Code" }

// Argv is `qwen --acp` with the flags above, then AGENT_ARGS.
func (q qwen) Argv(Invocation) []string {
	mode := "yolo"
	if q.asks() {
		mode = "auto-edit"
	}
	argv := []string{q.s.Bin, "--acp", "--auth-type", "openai", "--approval-mode", mode, "--append-system-prompt", q.s.SystemPrompt}
	if q.s.Model != "" {
		argv = append(argv, "--model", q.s.Model)
	}
	return append(argv, q.s.Args...)
}

func (q qwen) PersistentArgv(inv Invocation) []string { return q.Argv(inv) }

// Route: through the proxy to OpenAI's API (openAIRoute).
func (qwen) Route(getenv func(string) string) ModelRoute { return openAIRoute(getenv) }

// Env points Qwen Code at its settings and at the proxy, with the
// proxy's token as its key.
func (q qwen) Env(api ModelAPI) []string {
	env := []string{"QWEN_CODE_SYSTEM_SETTINGS_PATH=" + q.settingsPath(), "QWEN_CODE_LEGACY_MCP_BLOCKING=1"}
	if api.URL != "" {
		env = append(env, "OPENAI_BASE_URL="+strings.TrimSuffix(api.URL, "/")+"/v1", "OPENAI_API_KEY="+api.Token)
	}
	return env
}

func (q qwen) settingsPath() string { return filepath.Join(q.s.RuntimeDir, "qwen-settings.json") }

// asks says whether Qwen Code asks the wrapper before each shell command
// (AGENT_APPROVAL with a list); otherwise a list is the guard hook's.
func (q qwen) asks() bool { return q.s.Approval && !q.s.AllowedCommands.ShellRules().All }

// guards says whether the guard hook enforces ALLOWED_COMMANDS.
func (q qwen) guards() bool { return !q.s.Approval && !q.s.AllowedCommands.ShellRules().All }

// Setup writes the settings file.
func (q qwen) Setup(string, ModelAPI) error {
	if q.s.RuntimeDir == "" {
		return fmt.Errorf("qwen settings: no runtime directory")
	}
	if q.guards() && q.s.SelfPath == "" {
		return fmt.Errorf("qwen guard: the wrapper's own path is unknown, so ALLOWED_COMMANDS cannot be enforced (set ALLOWED_COMMANDS=* to run without it)")
	}
	b, _ := json.MarshalIndent(q.settings(), "", "  ")
	return writeReadOnly(q.settingsPath(), b, "qwen settings")
}

// settings are Qwen Code's system settings: see qwen.
func (q qwen) settings() map[string]any {
	cfg := map[string]any{
		"general":   map[string]any{"enableAutoUpdate": false, "chatRecording": true},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"model":     map[string]any{"skipNextSpeakerCheck": true, "skipLoopDetection": true},
		"memory":    map[string]any{"enableManagedAutoMemory": false, "enableManagedAutoDream": false},
		"ui":        map[string]any{"enableFollowupSuggestions": false},
	}
	switch {
	case q.asks():
		cfg["permissions"] = map[string]any{"ask": []string{"Bash"}}
	case q.guards():
		cfg["hooks"] = map[string]any{"PreToolUse": []any{map[string]any{
			"matcher": "run_shell_command|monitor",
			"hooks":   []any{map[string]any{"type": "command", "command": shellQuote(q.s.SelfPath) + " guard"}},
		}}}
	}
	return cfg
}

// Model: the session's model as Qwen Code names it
// ("$runtime|openai|<model>(openai)"), without its provider, else
// AGENT_MODEL.
func (q qwen) Model(init *Init) string {
	if init != nil && init.Model != "" {
		return qwenModel(init.Model)
	}
	return q.s.Model
}

// qwenModel is the model of a Qwen Code model id: the part after the
// last "|", without a "(<auth type>)" suffix.
func qwenModel(id string) string {
	if i := strings.LastIndexByte(id, '|'); i >= 0 {
		id = id[i+1:]
	}
	if i := strings.LastIndexByte(id, '('); i > 0 && strings.HasSuffix(id, ")") {
		id = id[:i]
	}
	return id
}
