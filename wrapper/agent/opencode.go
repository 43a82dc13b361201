package agent

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// OpenCode's adapter (npm opencode-ai, 1.18): `opencode acp`, an ACP
// agent (acp.go, ACPClient) that the wrapper configures. ACP rather than
// its `opencode run --format json`: ACP gives a session to load
// (session/load), a turn to cancel with the process kept
// (session/cancel), permission requests to answer, and one process
// across a worker's tasks; `run` gives none of these.
//
// Setup writes the wrapper's OpenCode configuration to RuntimeDir, which
// OPENCODE_CONFIG points at (the person's own ~/.config/opencode is left
// alone):
//   - the model API: a provider, agentvisor, of the Anthropic Messages API
//     (@ai-sdk/anthropic, built into OpenCode) whose baseURL is the
//     wrapper's proxy and whose key is {env:AGENTVISOR_MODEL_TOKEN}, the
//     proxy's token, never the real key. The proxy forwards to
//     ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY, as for Claude;
//   - the model: AGENT_MODEL, else claude-sonnet-4-5, for the session and
//     for OpenCode's small tasks; its session-title agent is turned off
//     (one model call fewer per session);
//   - the system prompt: the wrapper's section in a file named by
//     instructions;
//   - ALLOWED_COMMANDS: permission bash "ask" (every other tool
//     "allow"), so each shell command is a session/request_permission the
//     wrapper decides; "*" makes bash "allow". A refused command does not
//     end the turn (experimental.continue_loop_on_deny): the model is told
//     and goes on, as with the other agents.
//
// OPENCODE_DISABLE_MODELS_FETCH and the other switches in Env keep
// OpenCode from reaching its own services (models.dev, updates, plugins,
// LSP downloads) from inside a worker.
type opencode struct{ acp }

func init() {
	register(protocol.AgentOpenCode, func(s Settings) Adapter { return opencode{acp{s: s}} })
}

// OpenCode's provider, the variable its key is read from, and its
// default model.
const (
	opencodeProvider     = "agentvisor"
	opencodeTokenEnv     = "AGENTVISOR_MODEL_TOKEN"
	opencodeDefaultModel = "claude-sonnet-4-5"
)

func (opencode) Type() protocol.AgentType { return protocol.AgentOpenCode }
func (opencode) Name() string             { return "OpenCode" }

// Argv is `opencode acp --cwd <dir>` (the task's worktree, else the
// workspace), then AGENT_ARGS.
func (o opencode) Argv(inv Invocation) []string {
	return append([]string{o.s.Bin, "acp", "--cwd", o.s.dir(inv)}, o.s.Args...)
}

func (o opencode) PersistentArgv(inv Invocation) []string { return o.Argv(inv) }

// Route: through the proxy, to ANTHROPIC_BASE_URL or the Anthropic API.
func (opencode) Route(getenv func(string) string) ModelRoute {
	return ModelRoute{Proxied: true, Upstream: getenv("ANTHROPIC_BASE_URL")}
}

// Env points OpenCode at the wrapper's configuration, gives it the
// proxy's token, and turns off its own network traffic.
func (o opencode) Env(api ModelAPI) []string {
	env := []string{"OPENCODE_CONFIG=" + o.configPath(), "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1", "OPENCODE_DISABLE_SHARE=1",
		"OPENCODE_DISABLE_CLAUDE_CODE=1", "OPENCODE_DISABLE_EXTERNAL_SKILLS=1"}
	if api.URL != "" {
		env = append(env, opencodeTokenEnv+"="+api.Token)
	}
	return env
}

func (o opencode) configPath() string { return filepath.Join(o.s.RuntimeDir, "opencode.json") }

// Setup writes the configuration and the instructions file it names.
func (o opencode) Setup(_ string, api ModelAPI) error {
	if o.s.RuntimeDir == "" {
		return fmt.Errorf("opencode config: no runtime directory")
	}
	instructions := filepath.Join(o.s.RuntimeDir, "opencode-instructions.md")
	if err := writeReadOnly(instructions, []byte(o.s.SystemPrompt), "opencode instructions"); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(o.config(api.URL, instructions), "", "  ")
	return writeReadOnly(o.configPath(), b, "opencode config")
}

// config is OpenCode's configuration: see opencode.
func (o opencode) config(proxyURL, instructions string) map[string]any {
	bash := "ask"
	if o.s.AllowedCommands.ShellRules().All {
		bash = "allow"
	}
	model := o.modelID()
	cfg := map[string]any{
		"$schema":      "https://opencode.ai/config.json",
		"autoupdate":   false,
		"share":        "disabled",
		"instructions": []string{instructions},
		"permission":   map[string]any{"bash": bash},
		"agent":        map[string]any{"title": map[string]any{"disable": true}},
		// A refused command ends OpenCode's turn by default; the other
		// agents tell the model and go on.
		"experimental": map[string]any{"continue_loop_on_deny": true},
	}
	if proxyURL != "" {
		cfg["model"] = opencodeProvider + "/" + model
		cfg["small_model"] = opencodeProvider + "/" + model
		cfg["provider"] = map[string]any{opencodeProvider: map[string]any{
			"npm": "@ai-sdk/anthropic", "name": opencodeProvider,
			"options": map[string]any{"baseURL": strings.TrimSuffix(proxyURL, "/") + "/v1", "apiKey": "{env:" + opencodeTokenEnv + "}"},
			"models":  map[string]any{model: map[string]any{"name": model}},
		}}
	} else if o.s.Model != "" {
		cfg["model"] = o.s.Model
	}
	return cfg
}

func (o opencode) modelID() string {
	if o.s.Model != "" {
		return o.s.Model
	}
	return opencodeDefaultModel
}

// Model: the session's model without the provider (agentvisor/...), else
// the configured one.
func (o opencode) Model(init *Init) string {
	if init != nil && init.Model != "" {
		_, m, ok := strings.Cut(init.Model, "/")
		if ok {
			return m
		}
		return init.Model
	}
	return o.modelID()
}
