package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// OpenCode's configuration, in the runtime directory OPENCODE_CONFIG
// names: the provider at the proxy with the token read from the
// environment (never written), the model, the wrapper's section as
// instructions, bash asked about unless every command is allowed, and a
// refusal that does not end the turn.
func TestOpenCodeSetup(t *testing.T) {
	for _, list := range []string{"worker.progress", "*"} {
		dir := t.TempDir()
		s := Settings{Bin: "opencode", Workspace: "/ws", RuntimeDir: dir, SystemPrompt: "SECTION", AllowedCommands: allowed(t, list)}
		a := adapterFor(t, protocol.AgentOpenCode, s)
		api := ModelAPI{URL: "http://127.0.0.1:9/", Token: "tok-secret"}
		if err := a.Setup("/home/x", api); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "opencode.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Model        string
			Instructions []string
			Permission   map[string]string
			Experimental map[string]bool
			Provider     map[string]struct {
				NPM     string `json:"npm"`
				Options map[string]string
			}
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		p := cfg.Provider["agentvisor"]
		wantBash := map[string]string{"*": "allow", "worker.progress": "ask"}[list]
		if cfg.Model != "agentvisor/claude-sonnet-4-5" || p.NPM != "@ai-sdk/anthropic" || p.Options["baseURL"] != "http://127.0.0.1:9/v1" ||
			p.Options["apiKey"] != "{env:AGENTVISOR_MODEL_TOKEN}" || cfg.Permission["bash"] != wantBash || !cfg.Experimental["continue_loop_on_deny"] {
			t.Fatalf("%s: config %s", list, b)
		}
		if strings.Contains(string(b), "tok-secret") {
			t.Fatal("the proxy's token is in the file")
		}
		if in, _ := os.ReadFile(cfg.Instructions[0]); string(in) != "SECTION" {
			t.Fatalf("instructions %q", in)
		}
		env := a.Env(api)
		if !slices.Contains(env, "OPENCODE_CONFIG="+filepath.Join(dir, "opencode.json")) || !slices.Contains(env, "AGENTVISOR_MODEL_TOKEN=tok-secret") ||
			!slices.Contains(env, "OPENCODE_DISABLE_MODELS_FETCH=1") {
			t.Fatalf("env %v", env)
		}
		if argv := a.Argv(Invocation{Prompt: "p"}); strings.Join(argv, " ") != "opencode acp --cwd /ws" {
			t.Fatalf("argv %v", argv)
		}
		if m := a.Model(&Init{Model: "agentvisor/claude-sonnet-4-5"}); m != "claude-sonnet-4-5" {
			t.Fatalf("model %q", m)
		}
	}
}
