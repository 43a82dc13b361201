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

// Qwen Code's command line and system settings, per way ALLOWED_COMMANDS
// is enforced: a list by the guard hook in yolo mode, a list with
// AGENT_APPROVAL by asking (auto-edit and an ask rule on every shell
// command), "*" by nothing; the proxy's token only in the environment.
func TestQwenSetup(t *testing.T) {
	for _, tt := range []struct {
		name, list string
		approval   bool
		mode       string
		hook, ask  bool
	}{
		{"list", "worker.progress", false, "yolo", true, false},
		{"list with approval", "worker.progress", true, "auto-edit", false, true},
		{"all", "*", false, "yolo", false, false},
		{"all with approval", "*", true, "yolo", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := Settings{Bin: "qwen", Workspace: "/ws", RuntimeDir: dir, SystemPrompt: "SECTION", AllowedCommands: allowed(t, tt.list),
				Approval: tt.approval, SelfPath: "/usr/local/bin/worker-wrapper", Model: "qwen3-coder-plus"}
			a := adapterFor(t, protocol.AgentQwen, s)
			api := ModelAPI{URL: "http://127.0.0.1:9/", Token: "tok-secret"}
			if err := a.Setup("/home/x", api); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "qwen-settings.json")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				Permissions struct{ Ask []string }
				Hooks       struct {
					PreToolUse []struct {
						Matcher string
						Hooks   []struct{ Type, Command string }
					}
				}
				Privacy struct{ UsageStatisticsEnabled *bool }
				General struct{ EnableAutoUpdate, ChatRecording *bool }
				Memory  struct{ EnableManagedAutoMemory *bool }
			}
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			hook := len(cfg.Hooks.PreToolUse) == 1 && cfg.Hooks.PreToolUse[0].Matcher == "run_shell_command|monitor" &&
				cfg.Hooks.PreToolUse[0].Hooks[0].Command == "'/usr/local/bin/worker-wrapper' guard"
			ask := slices.Equal(cfg.Permissions.Ask, []string{"Bash"})
			if hook != tt.hook || ask != tt.ask || len(cfg.Hooks.PreToolUse) > 1 || (!tt.hook && len(cfg.Hooks.PreToolUse) != 0) {
				t.Fatalf("hook %v, ask rule %v:\n%s", hook, ask, b)
			}
			if off := func(p *bool) bool { return p != nil && !*p }; !off(cfg.Privacy.UsageStatisticsEnabled) || !off(cfg.General.EnableAutoUpdate) ||
				!off(cfg.Memory.EnableManagedAutoMemory) || cfg.General.ChatRecording == nil || !*cfg.General.ChatRecording {
				t.Fatalf("settings %s", b)
			}
			if strings.Contains(string(b), "tok-secret") {
				t.Fatal("the proxy's token is in the file")
			}
			env := a.Env(api)
			for _, want := range []string{"QWEN_CODE_SYSTEM_SETTINGS_PATH=" + path, "OPENAI_BASE_URL=http://127.0.0.1:9/v1",
				"OPENAI_API_KEY=tok-secret", "QWEN_CODE_LEGACY_MCP_BLOCKING=1"} {
				if !slices.Contains(env, want) {
					t.Fatalf("env %v lacks %s", env, want)
				}
			}
			want := "qwen --acp --auth-type openai --approval-mode " + tt.mode + " --append-system-prompt SECTION --model qwen3-coder-plus"
			if argv := a.Argv(Invocation{Prompt: "p"}); strings.Join(argv, " ") != want || !slices.Equal(a.PersistentArgv(Invocation{}), argv) {
				t.Fatalf("argv %q, want %q", argv, want)
			}
		})
	}
}

// Qwen Code's model ids name the model without their provider; its
// model calls go through the proxy to OpenAI's API with OPENAI_API_KEY.
func TestQwenModelAndRoute(t *testing.T) {
	a := adapterFor(t, protocol.AgentQwen, Settings{Model: "configured"})
	for id, want := range map[string]string{"$runtime|openai|qwen-stub(openai)": "qwen-stub", "qwen3-coder-plus(openai)": "qwen3-coder-plus",
		"plain": "plain"} {
		if m := a.Model(&Init{Model: id}); m != want {
			t.Errorf("model of %q: %q, want %q", id, m, want)
		}
	}
	if m := a.Model(nil); m != "configured" {
		t.Errorf("model without init %q", m)
	}
	env := map[string]string{"OPENAI_BASE_URL": "https://llm.example/v1/", "OPENAI_API_KEY": "sk-real"}
	r := a.Route(func(k string) string { return env[k] })
	if !r.Proxied || r.Upstream != "https://llm.example" || r.Credential == nil || r.Credential.AuthToken != "sk-real" {
		t.Fatalf("route %+v", r)
	}
	if err := adapterFor(t, protocol.AgentQwen, Settings{RuntimeDir: t.TempDir()}).Setup("", ModelAPI{}); err == nil ||
		!strings.Contains(err.Error(), "ALLOWED_COMMANDS") {
		t.Fatalf("a guard without the wrapper's path: %v", err)
	}
}
