package agent

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

func TestClaudePermissionArgs(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		skip     bool
		want     []string
	}{
		{"deny all", nil, true,
			[]string{"--permission-mode", "dontAsk", "--allowedTools=Edit,Write,NotebookEdit,Bash(worker-wrapper progress:*)"}},
		{"list", []string{"engineering.*", "project.get"}, true,
			[]string{"--permission-mode", "dontAsk", "--allowedTools=Edit,Write,NotebookEdit,Bash(worker-wrapper progress:*),Bash(project get:*),Bash(engineering:*)"}},
		{"star", []string{"*"}, true, []string{"--dangerously-skip-permissions"}},
		{"star, no skip", []string{"*"}, false,
			[]string{"--permission-mode", "dontAsk", "--allowedTools=Edit,Write,NotebookEdit,Bash"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Settings{SkipPermissions: tt.skip, SelfPath: "/usr/local/bin/worker-wrapper"}
			s.AllowedCommands, _ = protocol.ParseAllowedCommands(tt.patterns)
			if got := (claude{s}).permissionArgs(); !slices.Equal(got, tt.want) {
				t.Errorf("args %q, want %q", got, tt.want)
			}
		})
	}
}

// A persistent Claude reads stream-json and echoes the messages it takes;
// with AGENT_APPROVAL it asks on its control channel instead of refusing.
func TestClaudePersistentArgv(t *testing.T) {
	c := claude{Settings{Bin: "claude", SystemPrompt: "sys"}}
	argv := c.PersistentArgv(Invocation{Prompt: "hi", ResumeID: "s1"})
	joined := strings.Join(argv, " ")
	if !strings.HasPrefix(joined, "claude -p --input-format stream-json --replay-user-messages --output-format stream-json") ||
		!strings.Contains(joined, "--resume s1") || !strings.Contains(joined, "--permission-mode dontAsk") || slices.Contains(argv, "stdio") {
		t.Fatalf("persistent claude argv %q", argv)
	}
	c.s.Approval = true
	joined = strings.Join(c.PersistentArgv(Invocation{Prompt: "hi"}), " ")
	if !strings.Contains(joined, "--permission-mode default") || !strings.HasSuffix(joined, "--permission-prompt-tool stdio") {
		t.Fatalf("persistent claude argv with approval %q", joined)
	}
}

// Claude's MCP configuration and the check of its init line.
func TestClaudeMCPConfigAndInitCheck(t *testing.T) {
	c := claude{mcpSettings(t, 5*time.Second)}
	if err := c.Setup("", ModelAPI{}); err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(c.Argv(Invocation{Prompt: "p"}), " ")
	if !strings.Contains(argv, "--mcp-config "+c.mcpConfigPath()+" --strict-mcp-config") || !strings.Contains(argv, ",mcp__tm,mcp__web") {
		t.Errorf("claude argv: %s", argv)
	}
	if b, err := os.ReadFile(c.mcpConfigPath()); err != nil || !strings.Contains(string(b), "/bin/testmcp") {
		t.Errorf("claude's config: %s, %v", b, err)
	}
	if env := c.Env(ModelAPI{}); !slices.Contains(env, "MCP_CONNECTION_NONBLOCKING=0") || !slices.Contains(env, "MCP_TIMEOUT=5000") {
		t.Errorf("claude env: %q", env)
	}
	for _, tc := range []struct {
		name    string
		init    Init
		missing string // "" for none
	}{
		{"all connected", Init{MCPServers: []MCPServerStatus{{Name: "tm", Status: "connected"}, {Name: "web", Status: "connected"}}}, ""},
		{"failed", Init{MCPServers: []MCPServerStatus{{Name: "tm", Status: "failed"}, {Name: "web", Status: "connected"}}}, "tm (failed)"},
		{"pending", Init{MCPServers: []MCPServerStatus{{Name: "tm", Status: "connected"}, {Name: "web", Status: "pending"}}}, "web (pending)"},
		{"not reported", Init{}, "tm (not reported), web (not reported)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.init
			checkMissing(t, c.CheckInit(Event{Init: &in}), tc.missing)
		})
	}
	if e := c.CheckInit(Event{Turn: &Turn{}}); e != nil {
		t.Errorf("a turn checked: %v", e)
	}
	none := claude{Settings{}}
	if e := none.CheckInit(Event{Init: &Init{}}); e != nil || none.mcpArgs() != nil || slices.ContainsFunc(none.Env(ModelAPI{}), func(kv string) bool { return strings.HasPrefix(kv, "MCP_") }) {
		t.Errorf("no servers: %v %v %v", e, none.mcpArgs(), none.Env(ModelAPI{}))
	}
}

// checkMissing fails unless e says MCP_UNAVAILABLE naming missing, or is
// nil when missing is "".
func checkMissing(t *testing.T, e *protocol.Error, missing string) {
	t.Helper()
	if missing == "" {
		if e != nil {
			t.Fatalf("error %v", e)
		}
		return
	}
	if e == nil || e.Code != protocol.CodeMCPUnavailable || !strings.Contains(e.Message, missing) {
		t.Fatalf("error %v, want MCP_UNAVAILABLE naming %s", e, missing)
	}
}

// Claude gets the proxy as its API; a new session's context goes in its
// system prompt.
func TestClaudeModelAndContext(t *testing.T) {
	c := claude{Settings{Bin: "claude", SystemPrompt: "sys"}}
	if env := c.Env(ModelAPI{URL: "http://127.0.0.1:9", Token: "tok"}); !slices.Contains(env, "ANTHROPIC_BASE_URL=http://127.0.0.1:9") ||
		!slices.Contains(env, "ANTHROPIC_API_KEY=tok") || !slices.Contains(env, "DISABLE_TELEMETRY=1") {
		t.Errorf("claude env %q", env)
	}
	if r := c.Route(func(n string) string { return map[string]string{"ANTHROPIC_BASE_URL": "http://up"}[n] }); !r.Proxied || r.Upstream != "http://up" {
		t.Errorf("route %+v", r)
	}
	inv := c.WithContext(Invocation{Prompt: "task"}, "# Project context")
	argv := c.Argv(inv)
	if i := slices.Index(argv, "--append-system-prompt"); i < 0 || argv[i+1] != "sys\n# Project context" || inv.Prompt != "task" {
		t.Errorf("argv %q, prompt %q", argv, inv.Prompt)
	}
}
