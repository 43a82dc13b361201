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
