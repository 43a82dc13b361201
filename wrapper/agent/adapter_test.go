package agent

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// adapterFor is the adapter of agent type t with settings s, for tests.
func adapterFor(t *testing.T, typ protocol.AgentType, s Settings) Adapter {
	t.Helper()
	a, err := New(typ, s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Every agent type of the protocol has its adapter; no other type has one.
func TestEveryAgentTypeHasAnAdapter(t *testing.T) {
	for _, typ := range protocol.AgentTypes {
		if a := adapterFor(t, typ, Settings{}); a.Type() != typ || a.Name() == "" || a.InstructionsFile() == "" {
			t.Errorf("%s: adapter %T of type %s, name %q", typ, a, a.Type(), a.Name())
		}
	}
	if _, err := New("aider", Settings{}); err == nil {
		t.Error("an adapter for an unknown agent type")
	}
}

// testServers are the MCP servers of the adapters' tests.
var testServers = []protocol.MCPServer{
	{Name: "tm", Command: "/bin/testmcp", Args: []string{"-v"}, Env: map[string]string{"TAG": "x"}},
	{Name: "web", URL: "https://mcp.example/mcp", Headers: map[string]string{"Authorization": "Bearer t"}},
}

func mcpSettings(t *testing.T, timeout time.Duration) Settings {
	home := t.TempDir()
	allowed, err := protocol.ParseAllowedCommands([]string{"git.status"})
	if err != nil {
		t.Fatal(err)
	}
	return Settings{Bin: "agent", Workspace: home, MCPServers: testServers, MCPTimeout: timeout, AllowedCommands: allowed,
		RuntimeDir: filepath.Join(home, "runtime")}
}

// The servers in the mcpServers form both CLIs read.
func TestMCPDocument(t *testing.T) {
	var doc struct {
		MCPServers map[string]map[string]any `json:"mcpServers"`
	}
	if err := json.Unmarshal(mcpDocument(testServers), &doc); err != nil {
		t.Fatal(err)
	}
	if s := doc.MCPServers["tm"]; s["type"] != "stdio" || s["command"] != "/bin/testmcp" || s["env"].(map[string]any)["TAG"] != "x" {
		t.Errorf("stdio server: %v", s)
	}
	if s := doc.MCPServers["web"]; s["type"] != "http" || s["url"] != "https://mcp.example/mcp" || s["headers"] == nil {
		t.Errorf("http server: %v", s)
	}
}
