package spawner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

type fixture struct {
	s    *Spawner
	rc   *redis.Client
	dc   *client.Client
	keys protocol.Keys
	stub *stubmodel.Server

	mu     sync.Mutex
	others []*Spawner // made by as: their engines close with the fixture's
}

// as returns a second spawner of the fixture's configuration under
// another MANAGER_ID (another manager sharing the Redis and the engine).
func (f *fixture) as(managerID string) *Spawner {
	cfg := f.s.cfg
	cfg.ManagerID = managerID
	s := NewDocker(cfg, f.dc, f.rc, &images.Builder{Docker: f.dc, Redis: f.rc, Keys: cfg.Keys}, f.s.log)
	f.mu.Lock()
	f.others = append(f.others, s)
	f.mu.Unlock()
	return s
}

// newFixture: a spawner over the real engine and a test Redis, with its
// own key prefix (so that its containers are its own), whose workers reach
// the stub model.
func newFixture(t testing.TB, mod func(*Config)) *fixture {
	t.Helper()
	testkit.WorkerImages(t)
	r, rc := testkit.StartRedisClient(t)
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	// Negotiate now, before concurrent calls: the client negotiates
	// lazily, and that races between goroutines.
	dc.NegotiateAPIVersion(context.Background())
	t.Cleanup(func() { dc.Close() })
	stub, err := stubmodel.Start(stubmodel.Script{Fallback: &stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {\"ok\": true}}"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	t.Setenv("ANTHROPIC_BASE_URL", stub.URL)
	t.Setenv("ANTHROPIC_API_KEY", "sk-stub-0123456789")
	prefix := fmt.Sprintf("t%d", time.Now().UnixNano())
	cfg, err := ConfigFromEnv(func(k string) string {
		// WORKER_BASE_IMAGE (read by images/build-worker-base.sh too) keeps
		// a checkout's wrapper apart from another's on a shared engine.
		return map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": prefix, "WORKER_STOP_TIMEOUT": "12s",
			"WORKER_BASE_IMAGE": os.Getenv("WORKER_BASE_IMAGE")}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	// Workers are sealed by default: the fixture's own gateway serves
	// them, unless the test names a network mode or a gateway of its own.
	gwDir := gatewaytest.Dir(t)
	cfg.GatewayDir = gwDir
	cfg.DiskDir = testkit.TempDiskDir(t)
	if mod != nil {
		mod(&cfg)
	}
	if cfg.NetworkMode == NetworkSealed && cfg.GatewayDir == gwDir {
		gatewaytest.Start(t, gateway.Config{Dir: gwDir, Redis: r.Addr, Model: stub.URL})
	}
	log := slog.New(slog.NewJSONHandler(testLogOut(), nil))
	s := NewDocker(cfg, dc, rc, &images.Builder{Docker: dc, Redis: rc, Keys: cfg.Keys, BaseImage: cfg.BaseImage}, log)
	// No container or volume of this test survives it (the spare
	// namespaces' holders stop being made first).
	testkit.CleanupLabelled(t, testkit.KeyPrefixLabel(prefix))
	f := &fixture{s: s, rc: rc, dc: dc, keys: cfg.Keys, stub: stub}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, o := range append(f.others, s) {
			o.engine.Close(context.Background())
		}
	})
	return f
}

func (f *fixture) send(t testing.TB, stream string, task protocol.Task) {
	doc, _ := task.Encode()
	if err := f.rc.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
		if t == nil {
			panic(err)
		}
		t.Fatal(err)
	}
}

func (f *fixture) waitOutput(t testing.TB, stream, requestID string, timeout time.Duration) protocol.Output {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		msgs, _ := f.rc.XRange(context.Background(), stream, "-", "+").Result()
		for _, m := range msgs {
			data, _ := protocol.EntryData(m.Values)
			if _, typ, _ := protocol.PeekType(data); typ != protocol.TypeOutput {
				continue
			}
			o, err := protocol.DecodeOutput(data)
			if err != nil {
				t.Fatal(err)
			}
			if o.RequestID == requestID {
				return o
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no output for %s on %s within %v", requestID, stream, timeout)
	return protocol.Output{}
}

// countEvents counts a worker's lifecycle events of one kind.
func (f *fixture) countEvents(t testing.TB, worker string, ev protocol.Event) int {
	t.Helper()
	msgs, err := f.rc.XRange(context.Background(), f.keys.Lifecycle(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if l, err := protocol.DecodeLifecycle(data); err == nil && l.WorkerID == worker && l.Event == ev {
			n++
		}
	}
	return n
}

func TestWorkerLifecycle(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Capabilities: []protocol.Capability{protocol.CapGit},
		ProjectID: fmt.Sprintf("proj-%d", time.Now().UnixNano()), Instructions: "You are a test worker.",
		AllowedCommands: []string{"worker.progress"}}
	t.Cleanup(func() {
		exec.Command("docker", "volume", "rm", "-f", ProjectVolume(f.keys.Prefix, spec.AgentType, spec.ProjectID)).Run()
	})
	info, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != protocol.ContainerRunning || info.AgentType != protocol.AgentClaude || !strings.HasPrefix(info.Image, "worker:") {
		t.Fatalf("created %+v", info)
	}
	c, err := f.dc.ContainerInspect(ctx, info.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	hc := c.HostConfig
	if c.Config.User != "1000:1000" || hc.Memory != 512<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 512 ||
		len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" || len(hc.SecurityOpt) != 1 || c.Config.Labels[protocol.LabelWorkerID] != info.WorkerID {
		t.Fatalf("container config: user %q mem %d cpu %d pids %v capdrop %v secopt %v labels %v",
			c.Config.User, hc.Memory, hc.NanoCPUs, hc.PidsLimit, hc.CapDrop, hc.SecurityOpt, c.Config.Labels)
	}
	// Its project's disk (the default disk limit) as its home and
	// temporary directories over a read-only root, and (sealed, the
	// default) its gateway directory, read-only; no network of its own.
	mounts := map[string]container.MountPoint{}
	for _, m := range c.Mounts {
		mounts[m.Destination] = m
	}
	disk := filepath.Join(f.s.cfg.DiskDir, f.keys.Prefix, "volumes", ProjectVolume(f.keys.Prefix, spec.AgentType, spec.ProjectID))
	if len(c.Mounts) != 6 || mounts["/home/worker"].Source != disk+"/home" || mounts["/workspace"].Source != disk+"/home/workspace" || !strings.HasPrefix(mounts["/tmp"].Source, disk+"/tmp/") || !hc.ReadonlyRootfs ||
		mounts[sealedMount].Type != "bind" || mounts[sealedMount].RW || hc.NetworkMode != "none" {
		t.Fatalf("mounts %+v, read-only root %v, network %q", c.Mounts, hc.ReadonlyRootfs, hc.NetworkMode)
	}

	// A task reaches the worker through its input stream.
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "lc-1", ProjectID: spec.ProjectID, Prompt: "do it"})
	o := f.waitOutput(t, f.keys.Output(info.WorkerID), "lc-1", 60*time.Second)
	if o.Status != protocol.StatusComplete || string(o.Result) != `{"ok":true}` {
		t.Fatalf("output %+v", o)
	}
	// The spec's instructions, written to CLAUDE.md in the workspace,
	// reach the model.
	reqs := f.stub.Requests()
	if len(reqs) == 0 || !strings.Contains(reqs[0].System, "You are a test worker.") && !strings.Contains(reqs[0].Text(), "You are a test worker.") {
		t.Fatalf("the instructions did not reach the model (%d requests)", len(reqs))
	}

	if err := f.s.Pause(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.s.Status(ctx, info.WorkerID); st.Status != protocol.ContainerPaused || st.State != protocol.WorkerPaused {
		t.Fatalf("after pause: %+v", st)
	}
	if err := f.s.Unpause(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.s.Status(ctx, info.WorkerID); st.Status != protocol.ContainerRunning {
		t.Fatalf("after unpause: %+v", st)
	}
	list, err := f.s.List(ctx)
	if err != nil || len(list) != 1 || list[0].WorkerID != info.WorkerID {
		t.Fatalf("list %+v %v", list, err)
	}
	// Pauses racing each other (the wrapper's request, the idle monitor,
	// a person's command) all succeed, and the worker is paused once.
	var g errgroup.Group
	for range 6 {
		g.Go(func() error { return f.s.Pause(ctx, info.WorkerID) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("racing pauses: %v", err)
	}
	for range 6 {
		g.Go(func() error { return f.s.Unpause(ctx, info.WorkerID) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("racing unpauses: %v", err)
	}
	if n := f.countEvents(t, info.WorkerID, protocol.EventPaused); n != 2 {
		t.Errorf("%d paused events for two pauses", n)
	}
	if n := f.countEvents(t, info.WorkerID, protocol.EventUnpaused); n != 2 {
		t.Errorf("%d unpaused events for two unpauses", n)
	}
	if err := f.s.Pause(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := f.s.Delete(ctx, info.WorkerID); err != nil { // a paused worker too
		t.Fatal(err)
	}
	if time.Since(start) > 11*time.Second {
		t.Errorf("delete took %v: the wrapper did not stop on SIGTERM", time.Since(start))
	}
	if _, err := f.dc.ContainerInspect(ctx, info.ContainerID); err == nil {
		t.Fatal("container left after delete")
	}
	if _, err := f.s.Status(ctx, "no-such-worker"); !IsNotFound(err) {
		t.Fatalf("status of an unknown worker: %v", err)
	}
	if err := f.s.Delete(ctx, "no-such-worker"); !IsNotFound(err) {
		t.Fatalf("delete of an unknown worker: %v", err)
	}
	if _, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: "gpt"}); err == nil {
		t.Fatal("a bad spec was accepted")
	}
}

func TestConcurrencyLimitQueues(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.MaxWorkers = 1
		c.CreationTimeout = 1500 * time.Millisecond
		c.KeepIdleAtLimit = true
	})
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude}
	first, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Create(ctx, spec); !IsResourceExhausted(err) {
		t.Fatalf("create at the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	// A queued create is served when a slot frees.
	f.s.cfg.CreationTimeout = time.Minute
	done := make(chan error, 1)
	go func() {
		_, err := f.s.Create(ctx, spec)
		done <- err
	}()
	time.Sleep(700 * time.Millisecond)
	if n, _ := f.rc.LLen(ctx, ctlplane.CreationQueueKey(f.keys)).Result(); n != 1 {
		t.Fatalf("creation queue holds %d, want the waiting create", n)
	}
	if err := f.s.Delete(ctx, first.WorkerID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("queued create: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the queued create was not served when the slot freed")
	}
}

// testLogOut is where a fixture's manager logs: nowhere, unless
// SPAWNER_TEST_LOG=1 (stderr).
func testLogOut() io.Writer {
	if os.Getenv("SPAWNER_TEST_LOG") == "1" {
		return os.Stderr
	}
	return io.Discard
}
