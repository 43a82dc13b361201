package spawner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// A spec's MCP servers reach the wrapper (AGENT_MCP_SERVERS) without
// changing the worker's image, and the wrapper holds the agent to them:
// in a real container, with the real claude, a server that exits at once
// fails the task with MCP_UNAVAILABLE.
func TestMCPServersReachTheWorker(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	plain, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	servers := []protocol.MCPServer{{Name: "broken", Command: "false", Args: []string{"--no-such-flag"}}}
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, MCPServers: servers})
	if err != nil {
		t.Fatal(err)
	}
	if info.Image != plain.Image {
		t.Errorf("image %s, want %s: MCP servers are not part of the image", info.Image, plain.Image)
	}
	c, err := f.dc.ContainerInspect(ctx, info.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := protocol.EncodeMCPServers(servers)
	var got string
	for _, e := range c.Config.Env {
		if v, ok := strings.CutPrefix(e, protocol.EnvMCPServers+"="); ok {
			got = v
		}
	}
	if got != want {
		t.Fatalf("%s in the container: %q, want %q", protocol.EnvMCPServers, got, want)
	}
	pc, err := f.dc.ContainerInspect(ctx, plain.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pc.Config.Env {
		if strings.HasPrefix(e, protocol.EnvMCPServers+"=") {
			t.Errorf("a worker without servers got %s", e)
		}
	}

	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "mcp-broken", Prompt: "do it"})
	o := f.waitOutput(t, f.keys.Output(info.WorkerID), "mcp-broken", 60*time.Second)
	if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeMCPUnavailable || !strings.Contains(o.Error.Message, "broken") {
		t.Fatalf("output %+v (error %+v), want MCP_UNAVAILABLE", o, o.Error)
	}
	t.Logf("image %s; %s", info.Image, o.Error.Message)
}

// A warm pool's template names its MCP servers: a create is served from
// it only when it asks for the same servers (a warm worker's agent runs
// with the servers it was made with).
func TestPoolTemplateCoversMCPServers(t *testing.T) {
	ps, err := ParsePools([]byte(`[{"name":"tickets","spec":{"agent_type":"claude","mcp_servers":[{"name":"t","command":"tickets-mcp"}]},"min_warm":1}]`))
	if err != nil {
		t.Fatal(err)
	}
	s := &Spawner{cfg: Config{Pools: ps}}
	for _, tc := range []struct {
		name    string
		servers []protocol.MCPServer
		match   bool
	}{
		{"same servers", []protocol.MCPServer{{Name: "t", Command: "tickets-mcp"}}, true},
		{"no servers", nil, false},
		{"other args", []protocol.MCPServer{{Name: "t", Command: "tickets-mcp", Args: []string{"-v"}}}, false},
	} {
		p := s.poolFor(protocol.WorkerSpec{AgentType: protocol.AgentClaude, MCPServers: tc.servers})
		if (p != nil) != tc.match {
			t.Errorf("%s: pool %+v, want a match %v", tc.name, p, tc.match)
		}
	}
	if _, err := ParsePools([]byte(`[{"name":"x","spec":{"agent_type":"claude","mcp_servers":[{"name":"t"}]},"min_warm":1}]`)); err == nil {
		t.Error("a template with an invalid server accepted")
	}
}
