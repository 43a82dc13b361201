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

func TestDroidPermissionArgs(t *testing.T) {
	tests := []struct {
		name      string
		patterns  []string
		skip      bool
		want      []string
		wantGuard bool
	}{
		{"list", []string{"git.push"}, true, []string{"--skip-permissions-unsafe", "--settings"}, true},
		{"star", []string{"*"}, true, []string{"--skip-permissions-unsafe"}, false},
		{"star, no skip", []string{"*"}, false, []string{"--auto", "high"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := droid{Settings{SkipPermissions: tt.skip, SelfPath: "/usr/local/bin/worker-wrapper", RuntimeDir: t.TempDir()}}
			d.s.AllowedCommands, _ = protocol.ParseAllowedCommands(tt.patterns)
			got := d.permissionArgs()
			if tt.wantGuard {
				if len(got) != 3 || got[2] != d.guardSettingsPath() {
					t.Fatalf("args %q", got)
				}
				got = got[:2]
				if err := d.writeGuard(); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(d.guardSettingsPath())
				if err != nil || !strings.Contains(string(b), `"command": "'/usr/local/bin/worker-wrapper' guard"`) || !strings.Contains(string(b), `"matcher": "Execute"`) {
					t.Errorf("guard settings %s (%v)", b, err)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("args %q, want %q", got, tt.want)
			}
		})
	}
}

// With DROID_BASE_URL, Droid runs a custom model pointing there: our own
// name for the stub, or AGENT_MODEL (a model that API serves).
func TestDroidCustomModel(t *testing.T) {
	for _, tc := range []struct{ agentModel, wantID string }{
		{"", "agentvisor"},
		{"claude-sonnet-4-5", "claude-sonnet-4-5"},
	} {
		home := t.TempDir()
		all, _ := protocol.ParseAllowedCommands([]string{"*"})
		d := droid{Settings{Bin: "droid", Workspace: filepath.Join(home, "ws"), BaseURL: "http://127.0.0.1:9", Model: tc.agentModel, AllowedCommands: all}}
		if err := d.Setup(home, ModelAPI{}); err != nil {
			t.Fatal(err)
		}
		argv := d.Argv(Invocation{Prompt: "hi"})
		i := slices.Index(argv, "-m")
		if i < 0 || argv[i+1] != "custom:"+tc.wantID {
			t.Errorf("AGENT_MODEL %q: argv %q, want -m custom:%s", tc.agentModel, argv, tc.wantID)
		}
		b, err := os.ReadFile(filepath.Join(home, ".factory", "settings.json"))
		if err != nil || !strings.Contains(string(b), `"model": "`+tc.wantID+`"`) || !strings.Contains(string(b), `"baseUrl": "http://127.0.0.1:9"`) {
			t.Errorf("AGENT_MODEL %q: settings %s (%v)", tc.agentModel, b, err)
		}
		if m := d.Model(nil); m != tc.wantID {
			t.Errorf("AGENT_MODEL %q: priced as %q, want %q", tc.agentModel, m, tc.wantID)
		}
	}
	// With the proxy, the custom model points at it, with its token.
	home := t.TempDir()
	all, _ := protocol.ParseAllowedCommands([]string{"*"})
	d := droid{Settings{BaseURL: "http://127.0.0.1:9", AllowedCommands: all}}
	if err := d.Setup(home, ModelAPI{URL: "http://127.0.0.1:7", Token: "agentvisor-proxy-t"}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(home, ".factory", "settings.json")); err != nil || !strings.Contains(string(b), `"baseUrl": "http://127.0.0.1:7"`) ||
		!strings.Contains(string(b), `"apiKey": "agentvisor-proxy-t"`) {
		t.Errorf("settings at the proxy: %s (%v)", b, err)
	}
}

// A persistent Droid runs in its JSON-RPC mode, its session and prompts on
// stdin.
func TestDroidPersistentArgv(t *testing.T) {
	d := droid{Settings{Bin: "droid", Workspace: "/ws", BaseURL: "http://127.0.0.1:9", SkipPermissions: true}}
	argv := d.PersistentArgv(Invocation{Prompt: "hi", ResumeID: "s1"})
	joined := strings.Join(argv, " ")
	if !strings.Contains(joined, "--input-format stream-jsonrpc --output-format stream-jsonrpc") || slices.Contains(argv, "-f") ||
		slices.Contains(argv, "--session-id") || slices.Contains(argv, "hi") || !slices.Contains(argv, "--append-system-prompt") {
		t.Fatalf("persistent droid argv %q", argv)
	}
}

// Droid's MCP configuration, its refusal to start without a server, and
// the check of its init line.
func TestDroidMCPConfigAndInitCheck(t *testing.T) {
	s := mcpSettings(t, time.Second)
	home := s.Workspace
	d := droid{s}
	if err := d.writeMCP(home); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(home, ".factory", "mcp.json")); err != nil || !strings.Contains(string(b), "mcp.example") {
		t.Errorf("droid's mcp.json: %s, %v", b, err)
	}
	if argv := strings.Join(d.Argv(Invocation{Prompt: "p"}), " "); !strings.Contains(argv, "--add-tools MCP:tm,MCP:web") {
		t.Errorf("droid argv: %s", argv)
	}
	refused := d.CheckOutcome(Outcome{Exit: ExitStatus{Code: 1}, Stderr: "Unknown tool identifier(s)\n"})
	if v := Judge(refused, false); v.Error == nil || v.Error.Code != protocol.CodeMCPUnavailable || v.Rule != "aborted" {
		t.Errorf("droid's refusal judged %+v", v)
	}
	if o := d.CheckOutcome(Outcome{Exit: ExitStatus{Code: 1}, Stderr: "boom"}); o.Aborted != nil {
		t.Errorf("another crash taken for MCP: %v", o.Aborted)
	}
	for _, tc := range []struct {
		name    string
		init    Init
		missing string
	}{
		{"both", Init{Tools: []string{"Read", "tm___echo", "web___search"}}, ""},
		{"one", Init{Tools: []string{"Read", "tm___echo"}}, "web (none of its tools offered at start)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.init
			checkMissing(t, d.CheckInit(Event{Init: &in}), tc.missing)
		})
	}
	if err := (droid{Settings{MCPServers: testServers}}).writeMCP(""); err == nil || !strings.Contains(err.Error(), "HOME is not set") {
		t.Errorf("mcp.json without HOME: %v", err)
	}
}

// Droid reaches its custom model through the proxy, or Factory's service
// by itself with its own login; a new session's context goes in its
// prompt.
func TestDroidRouteAndContext(t *testing.T) {
	custom, factory := droid{Settings{BaseURL: "http://model"}}, droid{Settings{}}
	if r := custom.Route(nil); !r.Proxied || r.Upstream != "http://model" || custom.KeepsEnv("FACTORY_API_KEY") {
		t.Errorf("custom model: route %+v", r)
	}
	if r := factory.Route(nil); r.Proxied || r.Direct == "" || !factory.KeepsEnv("FACTORY_API_KEY") || factory.KeepsEnv("ANTHROPIC_API_KEY") {
		t.Errorf("Factory's service: route %+v", r)
	}
	if inv := factory.WithContext(Invocation{Prompt: "task"}, "# Project context"); inv.Prompt != "# Project context\n\n# Task\ntask" || inv.Extra != "" {
		t.Errorf("invocation %+v", inv)
	}
	if m := factory.Model(&Init{Model: "custom:agentvisor"}); m != "agentvisor" {
		t.Errorf("model of the init line %q", m)
	}
}
