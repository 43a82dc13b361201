package spawner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
)

// A sealed worker (the real claude, the stub model) works through its
// gateway's sockets alone: its task is answered, its container has no
// network, and from inside it the host's Redis, the model server and any
// name are out of reach. Deleting it closes its sockets at the gateway.
func TestSealedWorker(t *testing.T) {
	dir := shortDir(t)
	f := newFixture(t, func(c *Config) { c.NetworkMode, c.GatewayDir = NetworkSealed, dir })
	redisAddr := f.rc.Options().Addr
	modelAddr := strings.TrimPrefix(f.stub.URL, "http://")
	g, err := gateway.New(gateway.Config{Dir: dir, Redis: redisAddr, Model: modelAddr})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Stop(context.Background()) })
	ctx := context.Background()

	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "sealed-1", Prompt: "Say done."})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "sealed-1", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the sealed worker's task: %+v", o)
	}
	if len(f.stub.Requests()) == 0 {
		t.Fatal("the model saw no call: the task did not go through model.sock")
	}
	if st := g.Stats()[info.WorkerID]; st.Accepted < 2 {
		t.Fatalf("the gateway relayed %d connections for the worker, want its Redis and model connections", st.Accepted)
	}

	c, err := f.dc.ContainerInspect(ctx, ContainerName(info.WorkerID))
	if err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.NetworkMode != "none" {
		t.Fatalf("network mode %q, want none", c.HostConfig.NetworkMode)
	}
	// The probes below run: bash and timeout are there for uid 1000.
	if out, err := exec.Command("docker", "exec", "-u", "1000", ContainerName(info.WorkerID), "timeout", "5", "bash", "-c", "echo ok").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("a probe cannot run in the container: %v %s", err, out)
	}
	_, redisPort, _ := strings.Cut(redisAddr, ":")
	_, modelPort, _ := strings.Cut(modelAddr, ":")
	for _, probe := range []struct{ what, script string }{
		{"the host's Redis", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%s", redisPort)},
		{"the model server", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%s", modelPort)},
		{"a name", "getent hosts example.com"},
		{"an address outside", "exec 3<>/dev/tcp/10.0.0.1/80"},
	} {
		out, err := exec.Command("docker", "exec", "-u", "1000", ContainerName(info.WorkerID), "timeout", "5", "bash", "-c", probe.script).CombinedOutput()
		if err == nil {
			t.Errorf("%s is reachable from the sealed worker:\n%s", probe.what, out)
		}
	}
	out, err := exec.Command("docker", "exec", ContainerName(info.WorkerID), "cat", "/proc/net/tcp").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if hex := fmt.Sprintf(":%04X ", atoi(redisPort)); strings.Contains(string(out), hex) {
		t.Errorf("the sealed worker sees the host's Redis port in /proc/net/tcp:\n%s", out)
	}

	if err := f.s.Delete(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
	if ws := g.Workers(); len(ws) != 0 {
		t.Fatalf("the gateway still serves %v after the delete", ws)
	}
}

// Without a gateway a sealed create fails with UPSTREAM_UNAVAILABLE and
// leaves no container.
func TestSealedCreateWithoutAGateway(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.NetworkMode, c.GatewayDir = NetworkSealed, shortDir(t) })
	_, err := f.s.Create(context.Background(), protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if ProtocolError(err).Code != protocol.CodeUpstreamUnavailable {
		t.Fatalf("create without a gateway: %v, want UPSTREAM_UNAVAILABLE", err)
	}
	if ws, _ := f.s.List(context.Background()); len(ws) != 0 {
		t.Fatalf("workers left: %+v", ws)
	}
}

// shortDir is a temporary directory with a short path: a unix socket's
// path has at most 107 bytes, and t.TempDir's are long.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
