package spawner

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/errdefs"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// A sealed worker (the real claude, the stub model served over TLS, as
// the model API is) works through its gateway's sockets alone: its task
// is answered, its model calls carried by the gateway (the worker's token
// on each, HTTPS to the model, the server verified), its container has no
// network, and from inside it the host's Redis, the model server and any
// name are out of reach. Deleting it closes its sockets at the gateway.
func TestSealedWorker(t *testing.T) {
	dir := gatewaytest.Dir(t)
	f := newFixture(t, func(c *Config) { c.NetworkMode, c.GatewayDir = NetworkSealed, dir })
	model := httptest.NewUnstartedServer(f.stub)
	model.StartTLS()
	t.Cleanup(model.Close)
	roots := x509.NewCertPool()
	roots.AddCert(model.Certificate())
	t.Setenv("ANTHROPIC_BASE_URL", model.URL) // what the wrapper's proxy names; the gateway dials GATEWAY_MODEL
	redisAddr := f.rc.Options().Addr
	modelAddr := model.Listener.Addr().String()
	g := gatewaytest.Start(t, gateway.Config{Dir: dir, Redis: redisAddr, Model: modelAddr, UpstreamTLS: &tls.Config{RootCAs: roots}})
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
	if st := g.Stats()[info.WorkerID]; st.Accepted < 2 || st.ModelRequests == 0 || st.ModelRefused != 0 {
		t.Fatalf("the gateway's stats for the worker: %+v, want its Redis and model connections, its model calls forwarded, none refused", st)
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
	f := newFixture(t, func(c *Config) { c.NetworkMode, c.GatewayDir = NetworkSealed, gatewaytest.Dir(t) })
	_, err := f.s.Create(context.Background(), protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if ProtocolError(err).Code != protocol.CodeUpstreamUnavailable {
		t.Fatalf("create without a gateway: %v, want UPSTREAM_UNAVAILABLE", err)
	}
	if ws, _ := f.s.List(context.Background()); len(ws) != 0 {
		t.Fatalf("workers left: %+v", ws)
	}
}

// The agent's egress in a sealed worker (the real claude, its Bash tool
// driven by the stub model, speaking to its HTTP_PROXY): an allowed host
// goes through the gateway to its server (the gateway resolves the name);
// a host not on the list is refused, the consumer sees a warning naming
// it; after set_network, the newly allowed host passes and the removed one
// is refused.
func TestSealedWorkerEgress(t *testing.T) {
	dir := gatewaytest.Dir(t)
	hits := make(chan string, 16)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.Host
		io.WriteString(w, "hello from outside")
	}))
	defer upstream.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(upstream.URL, "http://"))
	f := newFixture(t, func(c *Config) { c.NetworkMode, c.GatewayDir = NetworkSealed, dir })
	g := gatewaytest.Start(t, gateway.Config{Dir: dir, Redis: f.rc.Options().Addr, Model: f.stub.URL,
		Resolver: outsideResolver, DialEgress: outsideAt(strings.TrimPrefix(upstream.URL, "http://"))})
	ctx := context.Background()

	// The agent's request: CONNECT through its proxy, then a GET in the tunnel.
	connect := func(host string) string {
		return fmt.Sprintf(`p=${HTTPS_PROXY##*:}; exec 3<>/dev/tcp/127.0.0.1/$p; printf 'CONNECT %[1]s:%[2]s HTTP/1.1\r\nHost: %[1]s:%[2]s\r\n\r\n' >&3; `+
			`read -r status <&3; echo "$status"; case "$status" in *" 200 "*) while read -r l <&3 && [ "${l%%$'\r'}" ]; do :; done; `+
			`printf 'GET / HTTP/1.0\r\nHost: %[1]s\r\n\r\n' >&3; cat <&3;; esac`, host, port)
	}
	var workerID string
	task := func(requestID, host string) protocol.Output {
		f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": connect(host), "description": "reach " + host}}},
			{Text: `{"status": "complete", "result": {"ok": true}}`},
		}})
		f.send(t, f.keys.Input(workerID), protocol.Task{RequestID: requestID, Prompt: "Fetch it."})
		return f.waitOutput(t, f.keys.Output(workerID), requestID, 2*time.Minute)
	}
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, AllowedCommands: []string{"*"},
		Network: &protocol.Network{Allow: []string{"allowed.test:" + port}}})
	if err != nil {
		t.Fatal(err)
	}
	workerID = info.WorkerID

	if o := task("egress-1", "allowed.test"); o.Status != protocol.StatusComplete {
		t.Fatalf("the allowed request's task: %+v", o)
	}
	select {
	case h := <-hits:
		if !strings.HasPrefix(h, "allowed.test") {
			t.Fatalf("the server saw host %q", h)
		}
	case <-time.After(10 * time.Second):
		reqs := f.stub.Requests()
		last := ""
		if n := len(reqs); n > 0 && len(reqs[n-1].Messages) > 0 {
			last = string(reqs[n-1].Messages[len(reqs[n-1].Messages)-1])
		}
		t.Fatalf("the allowed host was not reached through the gateway (gateway %+v); the tool's result:\n%s", g.Stats()[workerID], last)
	}
	if o := task("egress-2", "other.test"); o.Status != protocol.StatusComplete {
		t.Fatalf("the refused request's task: %+v", o)
	}
	if w := f.refusedConnection(t, info.WorkerID, "egress-2"); w == nil || w.Host != "other.test" || fmt.Sprint(w.Port) != port {
		t.Fatalf("no warning naming other.test:%s for egress-2: %+v", port, w)
	}
	select {
	case h := <-hits:
		t.Fatalf("a refused host reached the server (%s)", h)
	default:
	}

	// A live change: other.test allowed, allowed.test not any more.
	got, err := f.s.SetNetwork(ctx, info.WorkerID, protocol.Network{Allow: []string{"other.test:" + port}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Network == nil || len(got.Network.Allow) != 1 || got.Network.Allow[0] != "other.test:"+port {
		t.Fatalf("the status after set_network: %+v", got.Network)
	}
	if o := task("egress-3", "other.test"); o.Status != protocol.StatusComplete {
		t.Fatalf("egress-3: %+v", o)
	}
	select {
	case <-hits:
	case <-time.After(10 * time.Second):
		t.Fatal("the newly allowed host was not reached")
	}
	if o := task("egress-4", "allowed.test"); o.Status != protocol.StatusComplete {
		t.Fatalf("egress-4: %+v", o)
	}
	if w := f.refusedConnection(t, info.WorkerID, "egress-4"); w == nil || w.Host != "allowed.test" {
		t.Fatalf("no warning for the removed host: %+v", w)
	}
	if st := g.Stats()[info.WorkerID]; st.EgressAllowed < 2 || st.EgressRefused < 2 {
		t.Fatalf("the gateway counted %+v", st)
	}
}

// refusedConnection finds the warning of a refused connection on a
// worker's output stream for requestID.
func (f *fixture) refusedConnection(t *testing.T, worker, requestID string) *protocol.Refusal {
	t.Helper()
	return f.refusal(t, worker, requestID, protocol.RefusedToolNetwork)
}

// refusal finds the warning of a refusal by tool on a worker's output
// stream for requestID.
func (f *fixture) refusal(t *testing.T, worker, requestID, tool string) *protocol.Refusal {
	t.Helper()
	msgs, err := f.rc.XRange(context.Background(), f.keys.Output(worker), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if p, err := protocol.DecodeProgress(data); err == nil && p.RequestID == requestID && p.Refused != nil && p.Refused.Tool == tool {
			return p.Refused
		}
	}
	return nil
}

// A gateway restarted (stopped, its connections cut, and started again on
// the same directory, as after a crash) costs a sealed worker nothing: the
// wrapper reconnects to Redis and the model through the same sockets, its
// next task is answered, and it is never declared dead.
func TestSealedWorkerSurvivesAGatewayRestart(t *testing.T) {
	dir := gatewaytest.Dir(t)
	// Heartbeats every 2 s expire after 6: the 2 s outage below leaves the
	// wrapper 2 s or more to reconnect and beat, on a loaded machine too
	// (with 1 s, a heartbeat sent just before the stop left it under one).
	f := newFixture(t, func(c *Config) { c.NetworkMode, c.GatewayDir, c.HeartbeatInterval = NetworkSealed, dir, 2*time.Second })
	cfg := gateway.Config{Dir: dir, Redis: f.rc.Options().Addr, Model: f.stub.URL}
	g := gatewaytest.Start(t, cfg) // stopped by the test, then again (a no-op) when it ends
	// A manager runs: its health loop would declare a dead worker dead.
	f.startManager(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "before", Prompt: "Say done."})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "before", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("before the restart: %+v", o)
	}
	if err := g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the wrapper's connections are cut and it notices
	g2 := gatewaytest.Start(t, cfg)
	if ws := g2.Workers(); len(ws) != 1 || ws[0] != info.WorkerID {
		t.Fatalf("the restarted gateway serves %v", ws)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "after", Prompt: "Say done."})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "after", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("after the restart: %+v", o)
	}
	if n := f.countEvents(t, info.WorkerID, protocol.EventDead); n != 0 {
		t.Fatalf("the worker was declared dead %d times across the gateway's restart", n)
	}
	if err := f.s.Delete(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
}

// A sealed worker clones a private repository over HTTPS with the real
// git (the agent's Bash tool, the real claude): the gateway adds the
// credential on the way out, so the clone works while the token is in no
// file, variable, process or log of the worker, and in no Redis entry.
func TestSealedWorkerGitCloneWithTheGatewaysCredential(t *testing.T) {
	const user, token = "git", "tok-0a9c7e51-never-in-the-worker"
	srv := testkit.StartGitServer(t, user, token)
	dir := gatewaytest.Dir(t)
	f := newFixture(t, func(c *Config) { c.NetworkMode, c.GatewayDir = NetworkSealed, dir })
	gatewaytest.Start(t, gateway.Config{Dir: dir, Redis: f.rc.Options().Addr, Model: f.stub.URL,
		Credentials: []gateway.Credential{{Host: "git.example.test", Username: user, Password: token, Projects: []string{"shop"}}},
		UpstreamTLS: &tls.Config{RootCAs: srv.Roots, ServerName: "example.com"},
		Resolver:    outsideResolver, DialEgress: outsideAt(strings.TrimPrefix(srv.URL, "https://"))})
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "shop", AllowedCommands: []string{"*"},
		Capabilities: []protocol.Capability{protocol.CapGit}, Network: &protocol.Network{Allow: []string{"git.example.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": "cd /tmp && git clone -q https://git.example.test/repo.git && git -C repo rev-parse HEAD",
			"description": "clone"}}},
		{Text: `{"status": "complete", "result": {"ok": true}}`},
	}})
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "clone", Prompt: "Clone it."})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "clone", 3*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the clone's task: %+v", o)
	}
	reqs := f.stub.Requests()
	if len(reqs) < 2 || !strings.Contains(string(reqs[len(reqs)-1].Body), srv.Head) {
		last := ""
		if len(reqs) > 0 {
			last = string(reqs[len(reqs)-1].Body)
		}
		t.Fatalf("the clone did not reach commit %s; the model saw:\n%s", srv.Head, last)
	}
	if authed, _, _ := srv.Requests(); authed == 0 {
		t.Fatal("no request reached the git server with the credential")
	}

	// The token: nowhere in the worker.
	name := ContainerName(info.WorkerID)
	for what, args := range map[string][]string{
		"a process's environment or arguments": {"sh", "-c", "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'"},
		"a file":                               {"sh", "-c", "grep -rIl " + token + " /tmp /home /etc /run 2>/dev/null; true"},
	} {
		out, err := exec.Command("docker", append([]string{"exec", name}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v %s", what, err, out)
		}
		if strings.Contains(string(out), token) {
			t.Errorf("the token is in %s of the worker", what)
		}
	}
	if out, _ := exec.Command("docker", "logs", name).CombinedOutput(); strings.Contains(string(out), token) {
		t.Error("the token is in the worker's log")
	}
	keys, _ := f.rc.Keys(ctx, f.keys.Prefix+":*").Result()
	for _, k := range keys {
		if dump, _ := f.rc.Dump(ctx, k).Result(); strings.Contains(dump, token) {
			t.Errorf("the token is in Redis key %s", k)
		}
	}
}

// Test names stand for hosts outside: outsideResolver resolves each to a
// documentation address (TEST-NET-1), and the dialler of outsideAt takes
// every dial to one loopback server: nothing leaves the machine.
func outsideResolver(context.Context, string) ([]string, error) { return []string{"192.0.2.10"}, nil }

func outsideAt(server string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}
}

// Host networking is an opt-in: a worker there has no allowlist to change,
// and set_network says so with a stable code.
func TestSetNetworkRefusedWhenNotSealed(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.NetworkMode = "host" })
	_, err := f.s.SetNetwork(context.Background(), "any", protocol.Network{Allow: []string{"a.test"}})
	var e *Error
	if !errors.As(err, &e) || e.Code != protocol.CodeInvalidCommand || !strings.Contains(err.Error(), "not sealed") {
		t.Fatalf("set_network on host networking: %v", err)
	}
}

// Sealed workers join spare network namespaces made ahead of time: each
// worker its own holder's (never shared, never used twice), loopback only,
// and the holder goes with the worker; the spare ones go with the manager.
func TestSealedWorkersJoinSpareNamespaces(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	holders := map[string]bool{}
	var ids []string
	for i := 0; i < 3; i++ {
		spare := map[string]bool{}
		if i > 0 { // the first create finds none ready and starts the refill
			testkit.Eventually(t, "spare namespaces", time.Minute, func() bool { return f.s.dockerEngine().SparesReady() >= f.s.cfg.SpareNetns })
			// The spare holders: on the none network, labelled, nobody's
			// uid. (A worker's holder is removed shortly after the worker
			// started in its namespace, which lives on with the worker.)
			hs, err := f.dc.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
				filters.Arg("label", dockerengine.LabelRole+"="+dockerengine.RoleNetnsHolder), filters.Arg("label", protocol.LabelKeyPrefix+"="+f.keys.Prefix))})
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hs {
				hc, err := f.dc.ContainerInspect(ctx, h.ID)
				if err != nil {
					t.Fatalf("spare holder %s: %v", h.ID, err)
				}
				if hc.HostConfig.NetworkMode != "none" || hc.Config.User != "65534:65534" {
					t.Fatalf("spare holder %s: network %q, user %q", h.ID, hc.HostConfig.NetworkMode, hc.Config.User)
				}
				spare[h.ID] = true
			}
		}
		info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.WorkerID)
		c, err := f.dc.ContainerInspect(ctx, ContainerName(info.WorkerID))
		if err != nil {
			t.Fatal(err)
		}
		h := dockerengine.HolderOf(c.HostConfig.NetworkMode)
		if i == 0 {
			if c.HostConfig.NetworkMode != "none" {
				t.Fatalf("the first worker's network %q, want none (no spare yet)", c.HostConfig.NetworkMode)
			}
			continue
		}
		if h == "" || holders[h] || !spare[h] {
			t.Fatalf("worker %d: network %q: want a spare namespace of its own (spare: %v)", i, c.HostConfig.NetworkMode, spare)
		}
		holders[h] = true
		// Loopback only inside, as on the none network.
		out, err := exec.Command("docker", "exec", ContainerName(info.WorkerID), "cat", "/proc/net/dev").CombinedOutput()
		if err != nil {
			t.Fatalf("/proc/net/dev: %v %s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n")[2:] {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && name != "lo" {
				t.Fatalf("worker %d has interface %q:\n%s", i, name, out)
			}
		}
	}
	// A deleted worker's holder goes with it.
	for _, id := range ids {
		if err := f.s.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for h := range holders {
		testkit.Eventually(t, "the holder of a started worker gone", 10*time.Second, func() bool {
			_, err := f.dc.ContainerInspect(ctx, h)
			return IsNotFound(err) || errdefs.IsNotFound(err)
		})
	}
	// The spare ones go at the stop; nothing of the prefix is left.
	f.s.engine.Close(ctx)
	cs, err := f.dc.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", protocol.LabelKeyPrefix+"="+f.keys.Prefix))})
	if err != nil || len(cs) != 0 {
		t.Fatalf("containers left: %d (%v)", len(cs), err)
	}
}

// The reconciler leaves the spare namespaces' holders alone (they carry
// the key prefix, and their image the managed label): a worker created
// after a reconciliation still finds its spare.
func TestReconcileKeepsSpareNamespaces(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.CreationGrace = 0 })
	ctx := context.Background()
	f.s.engine.Prepare() // none ready: starts the refill
	testkit.Eventually(t, "spare namespaces", time.Minute, func() bool { return f.s.dockerEngine().SparesReady() >= f.s.cfg.SpareNetns })
	rep, err := f.s.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphansRemoved != 0 || rep.HoldersRemoved != 0 || f.s.dockerEngine().SparesReady() != f.s.cfg.SpareNetns {
		t.Fatalf("reconcile: %+v, %d spare left", rep, f.s.dockerEngine().SparesReady())
	}
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "after-reconcile", Prompt: "Say done."})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "after-reconcile", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the task of a worker in a spare namespace: %+v", o)
	}
}

// A manager that died leaves its spare namespaces' holders: the next
// manager of the host to reconcile removes them (no live manager marks
// them), and keeps its own.
func TestReconcileRemovesADeadManagersSpares(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.CreationGrace = 0 })
	ctx := context.Background()
	f.s.engine.Prepare()
	testkit.Eventually(t, "spare namespaces", time.Minute, func() bool { return f.s.dockerEngine().SparesReady() >= f.s.cfg.SpareNetns })
	// What a manager SIGKILLed an hour ago left: two holders of the key
	// prefix, its marks long expired.
	var dead []string
	for range 2 {
		resp, err := f.dc.ContainerCreate(ctx, &container.Config{Image: f.s.cfg.BaseImage, Entrypoint: []string{"sleep", "infinity"},
			Labels: map[string]string{dockerengine.LabelRole: dockerengine.RoleNetnsHolder, protocol.LabelManaged: "false",
				protocol.LabelKeyPrefix: f.keys.Prefix, protocol.LabelPrefix + "holder_manager": "a-dead-manager",
				protocol.LabelCreatedAt: protocol.FormatTime(time.Now().Add(-time.Hour))}},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.dc.ContainerRemove(context.Background(), resp.ID, container.RemoveOptions{Force: true}) })
		if err := f.dc.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, resp.ID)
	}
	rep, err := f.s.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.HoldersRemoved != len(dead) {
		t.Errorf("reconcile removed %d holders, want the dead manager's %d", rep.HoldersRemoved, len(dead))
	}
	for _, id := range dead {
		if _, err := f.dc.ContainerInspect(ctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("the dead manager's holder %.12s: %v, want gone", id, err)
		}
	}
	if n := f.s.dockerEngine().SparesReady(); n != f.s.cfg.SpareNetns {
		t.Errorf("%d spare namespaces of the live manager left, want %d", n, f.s.cfg.SpareNetns)
	}
}
