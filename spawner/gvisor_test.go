package spawner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// gvisorKernel is what gVisor's kernel says of itself in a sandbox's
// dmesg: its boot line, which no host kernel prints.
const gvisorKernel = "Starting gVisor"

// A sealed worker asking for gVisor runs in runsc (the engine says so)
// under gVisor's kernel (the sandbox's dmesg and /proc/version are
// gVisor's, not the host's), and works through its gateway's sockets:
// its task is answered (the real claude against the stub model), it
// pauses and resumes, its second task is answered, the host's loopback
// services stay out of reach, and a delete removes it.
func TestGVisorSealedWorker(t *testing.T) {
	f := newFixture(t, nil) // sealed, with the fixture's gateway
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Runtime: protocol.RuntimeGVisor})
	if err != nil {
		t.Fatal(err)
	}
	name := ContainerName(info.WorkerID)
	c, err := f.dc.ContainerInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.Runtime != "runsc" {
		t.Fatalf("the container's runtime is %q, want runsc", c.HostConfig.Runtime)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "gvisor-1", Prompt: "Say done."})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "gvisor-1", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the gVisor worker's task: %+v", o)
	}

	dmesg, err := exec.Command("docker", "exec", "-u", "1000", name, "dmesg").CombinedOutput()
	if err != nil || !strings.Contains(string(dmesg), gvisorKernel) {
		t.Fatalf("the worker's dmesg is not gVisor's (%v):\n%s", err, dmesg)
	}
	inside, err := exec.Command("docker", "exec", "-u", "1000", name, "cat", "/proc/version").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	host, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(inside), strings.TrimSpace(string(host))) {
		t.Fatalf("the worker's kernel is the host's %s: %s", host, inside)
	}
	t.Logf("inside the worker: %s", strings.TrimSpace(string(inside)))
	// On the host, the container's process is runsc's sandbox (the
	// wrapper is PID 1 of gVisor's kernel inside it), run with the
	// engine's arguments for it.
	pid := c.State.Pid
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if args[0] != "runsc-sandbox" || !slices.Contains(args, "boot") || !slices.Contains(args, "--network=none") {
		t.Fatalf("the container's process %d on the host is not runsc's sandbox: %q", pid, args)
	}

	_, redisPort, _ := strings.Cut(f.rc.Options().Addr, ":")
	for _, probe := range []struct{ what, script string }{
		{"the host's Redis", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%s", redisPort)},
		{"a name", "getent hosts example.com"},
		{"an address outside", "exec 3<>/dev/tcp/10.0.0.1/80"},
	} {
		if out, err := exec.Command("docker", "exec", "-u", "1000", name, "timeout", "5", "bash", "-c", probe.script).CombinedOutput(); err == nil {
			t.Errorf("%s is reachable from the gVisor worker:\n%s", probe.what, out)
		}
	}

	if err := f.s.Pause(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Unpause(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "gvisor-2", Prompt: "Say done."})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "gvisor-2", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the gVisor worker's task after a pause: %+v", o)
	}
	if err := f.s.Delete(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dc.ContainerInspect(ctx, name); err == nil {
		t.Fatal("the container outlived the delete")
	}
}

// A gVisor create the manager cannot carry out is refused with
// RUNTIME_UNAVAILABLE and makes nothing: workers that are not sealed (the
// sandbox has no network stack to the outside), an engine without the
// runtime named.
func TestGVisorRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"not sealed", func(c *Config) { c.NetworkMode = "host" }},
		{"no such runtime on the engine", func(c *Config) { c.GVisorRuntime = "runsc-not-registered" }},
		{"the manager's default, not sealed", func(c *Config) { c.NetworkMode, c.Runtime = "host", protocol.RuntimeGVisor }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.mod)
			spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Runtime: protocol.RuntimeGVisor}
			if strings.Contains(tc.name, "default") {
				spec.Runtime = ""
			}
			_, err := f.s.Create(context.Background(), spec)
			if code := ProtocolError(err).Code; code != protocol.CodeRuntimeUnavailable {
				t.Fatalf("create: %v (code %s), want RUNTIME_UNAVAILABLE", err, code)
			}
			if ws, _ := f.s.List(context.Background()); len(ws) != 0 {
				t.Fatalf("workers left: %+v", ws)
			}
		})
	}
}

// WORKER_RUNTIME=gvisor makes every worker whose spec names no runtime a
// gVisor worker; a spec's own runtime wins over it.
func TestGVisorManagerDefault(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Runtime = protocol.RuntimeGVisor })
	ctx := context.Background()
	for _, tc := range []struct {
		spec protocol.Runtime
		want string
	}{
		{"", "runsc"},
		{protocol.RuntimeRunc, "runc"},
	} {
		info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Runtime: tc.spec})
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.dc.ContainerInspect(ctx, ContainerName(info.WorkerID))
		if err != nil {
			t.Fatal(err)
		}
		if c.HostConfig.Runtime != tc.want {
			t.Errorf("spec runtime %q on a gvisor manager: the container's is %q, want %q", tc.spec, c.HostConfig.Runtime, tc.want)
		}
		if err := f.s.Delete(ctx, info.WorkerID); err != nil {
			t.Fatal(err)
		}
	}
}

// A hibernated gVisor worker wakes in gVisor: its next incarnation is
// made from its spec, runtime and all.
func TestGVisorWorkerWakesInGVisor(t *testing.T) {
	f := newFixture(t, nil)
	f.startManager(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "sandboxed", Runtime: protocol.RuntimeGVisor})
	if err != nil {
		t.Fatal(err)
	}
	id := info.WorkerID
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "gv-hib-1", Prompt: "first"})
	if o := f.waitOutput(t, f.keys.Output(id), "gv-hib-1", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("task 1: %+v", o)
	}
	idle(t, f, id)
	if err := f.s.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitHibernated(t, f, id, time.Minute)
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "gv-hib-2", Prompt: "second"})
	if o := f.waitOutput(t, f.keys.Output(id), "gv-hib-2", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the task that woke it: %+v", o)
	}
	if n := f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldIncarnation).Val(); n != "2" {
		t.Fatalf("incarnation %q after the wake, want 2", n)
	}
	c, err := f.dc.ContainerInspect(ctx, ContainerName(id))
	if err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.Runtime != "runsc" {
		t.Fatalf("the woken worker runs in %q, want runsc", c.HostConfig.Runtime)
	}
}

// An agent past its memory limit in gVisor: the host's OOM killer ends
// the whole sandbox (gVisor's kernel with it), not the agent alone as
// under runc. The task is answered OOM_KILLED all the same, from the
// container's death, and the worker's next incarnation (in gVisor again)
// runs the next task.
func TestGVisorMemoryHogIsOOMKilled(t *testing.T) {
	buildBenchBase(t)
	f := newFixture(t, func(c *Config) { useFakeAgent(c) })
	f.startManager(t)
	ctx := context.Background()
	spec := fakeSpec
	spec.Runtime, spec.Limits = protocol.RuntimeGVisor, protocol.Limits{Memory: "64m"}
	info, err := f.s.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "gv-oom-1", Prompt: "use memory fake:hog"})
	o := f.waitOutput(t, f.keys.Output(info.WorkerID), "gv-oom-1", 60*time.Second)
	if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeOOMKilled || !o.Error.Retryable {
		t.Fatalf("output %+v error %+v", o, o.Error)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "gv-oom-2", Prompt: "small"})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "gv-oom-2", 90*time.Second); o.Status != protocol.StatusComplete {
		t.Fatalf("task after the OOM kill: %+v", o)
	}
	inc := f.rc.HGet(ctx, f.keys.Status(info.WorkerID), protocol.StatusFieldIncarnation).Val()
	c, err := f.dc.ContainerInspect(ctx, ContainerName(info.WorkerID))
	if err != nil {
		t.Fatal(err)
	}
	if inc != "2" {
		t.Errorf("incarnation %q after the OOM kill, want 2: the sandbox died with its agent", inc)
	}
	if c.HostConfig.Runtime != "runsc" {
		t.Fatalf("the worker after the OOM kill runs in %q, want runsc", c.HostConfig.Runtime)
	}
}

// A warm pool of gVisor workers: its warm workers are made in runsc, and
// a create with the pool's spec takes one (a paused sandbox unpaused)
// that runs the task.
func TestGVisorWarmPool(t *testing.T) {
	buildBenchBase(t)
	spec := fakeSpec
	spec.Runtime = protocol.RuntimeGVisor
	f := newFixture(t, func(c *Config) {
		useFakeAgent(c)
		c.Pools = []PoolTemplate{{Name: "gvisor", Spec: spec, MinWarm: 1, MaxTotal: 2, RecycleAfter: 10, key: specKey(spec)}}
	})
	c := f.startManager(t)
	ctx := context.Background()
	var warm []string
	testkit.Eventually(t, "a warm gVisor worker", 2*time.Minute, // its image may be built first
		func() bool {
			warm, _ = f.s.rdb.Warm(ctx, "gvisor")
			return len(warm) == 1
		})
	r, err := c.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(warm, r.WorkerID) {
		t.Fatalf("the create got %s, not the warm %v", r.WorkerID, warm)
	}
	ci, err := f.dc.ContainerInspect(ctx, ContainerName(r.WorkerID))
	if err != nil {
		t.Fatal(err)
	}
	if ci.HostConfig.Runtime != "runsc" {
		t.Fatalf("the pool's worker runs in %q, want runsc", ci.HostConfig.Runtime)
	}
	f.send(t, f.keys.Input(r.WorkerID), protocol.Task{RequestID: "gv-pool-1", Prompt: "small"})
	if o := f.waitOutput(t, f.keys.Output(r.WorkerID), "gv-pool-1", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the pool worker's task: %+v", o)
	}
}
