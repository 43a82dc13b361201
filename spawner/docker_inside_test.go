package spawner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// buildInnerProbe compiles testdata/innerprobe as a static binary and
// returns the directory that holds it and a Dockerfile FROM scratch that
// copies it in and runs it: an inner image needing no registry.
func buildInnerProbe(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "probe"), "./testdata/innerprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	// A RUN step too: the build runs a container of its own.
	df := "FROM scratch\nCOPY probe /probe\nRUN [\"/probe\"]\nENTRYPOINT [\"/probe\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// inWorker runs a shell script in a worker's container as the worker's
// uid, as the agent's commands run.
func inWorker(t testing.TB, id, script string, timeout time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "exec", "-u", "1000:1000", "-w", "/home/worker", ContainerName(id), "bash", "-c", script).CombinedOutput()
	return string(out), err
}

// copyToWorker puts dir's files into the worker's /home/worker/inner.
func copyToWorker(t testing.TB, id, dir string) {
	t.Helper()
	if out, err := inWorker(t, id, "mkdir -p /home/worker/inner", 30*time.Second); err != nil {
		t.Fatalf("mkdir: %v %s", err, out)
	}
	if out, err := exec.Command("docker", "cp", dir+"/.", ContainerName(id)+":/home/worker/inner").CombinedOutput(); err != nil {
		t.Fatalf("docker cp: %v %s", err, out)
	}
}

// probeProcesses returns the host's processes whose command line is the
// probe's with "sleep" and their uids, read from the host's /proc.
func probeProcesses(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmdline), "/probe\x00sleep") {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				out[e.Name()] = strings.Fields(rest)[1] // the effective uid
			}
		}
	}
	return out
}

// checkInner holds what the probe printed in an inner container run
// with -v /etc:/x and the host's Redis address to what the worker must
// confine it to: root inside, loopback only, no engine socket, the
// host's Redis out of reach, and /x the worker's /etc, not the host's.
func checkInner(t *testing.T, id, out string) {
	t.Helper()
	workerHostname, _ := inWorker(t, id, "cat /etc/hostname", 30*time.Second)
	hostHostname, _ := os.ReadFile("/etc/hostname")
	lines := strings.Split(out, "\n")
	if !slices.Contains(lines, "uid 0") || !slices.Contains(lines, "interface lo") {
		t.Fatalf("the inner container: %s", out)
	}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "interface ") && l != "interface lo":
			t.Errorf("the inner container has a network beyond loopback: %s", l)
		case strings.HasPrefix(l, "socket "):
			t.Errorf("the inner container sees an engine's socket: %s", l)
		case strings.HasPrefix(l, "reached "):
			t.Errorf("the inner container reaches the host's Redis: %s", l)
		}
	}
	if !slices.Contains(lines, "mounted-hostname "+strings.TrimSpace(workerHostname)) {
		t.Errorf("-v /etc:/x is not the worker's /etc (its hostname %q): %s", workerHostname, out)
	}
	if h := strings.TrimSpace(string(hostHostname)); h != strings.TrimSpace(workerHostname) && slices.Contains(lines, "mounted-hostname "+h) {
		t.Errorf("-v /etc:/x is the host's /etc: %s", out)
	}
	// The worker's engine is its own: no host socket in the worker, and
	// none of the host's containers (its own included) in its list.
	if out, err := inWorker(t, id, "ls -l /var/run/docker.sock /run/docker.sock 2>&1; docker ps -a --format '{{.Names}}'", time.Minute); strings.Contains(out, "srw") ||
		strings.Contains(out, ContainerName("")) || err != nil {
		t.Errorf("the worker's engine is not its own: %v\n%s", err, out)
	}
}

// checkSleeper holds the inner container left running with the probe's
// "sleep" to the host's view: one process, of the worker's uid, in the
// worker's cgroup; and deletes the worker, after which it must be gone.
func checkSleeper(t *testing.T, f *fixture, id string) {
	t.Helper()
	ctx := context.Background()
	var procs map[string]string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if procs = probeProcesses(t); len(procs) > 0 {
			break
		}
	}
	if len(procs) != 1 {
		t.Fatalf("the host sees %d inner probe processes, want 1: %v", len(procs), procs)
	}
	for pid, uid := range procs {
		if uid != "1000" {
			t.Fatalf("the inner container's root is uid %s on the host (pid %s), want the worker's 1000", uid, pid)
		}
	}
	top, err := f.dc.ContainerTop(ctx, ContainerName(id), []string{"-eo", "pid,uid,args"})
	if err != nil {
		t.Fatal(err)
	}
	counted := false
	for _, p := range top.Processes {
		if _, ok := procs[p[0]]; ok {
			counted = true
		}
	}
	if !counted {
		t.Errorf("the inner process is not in the worker's cgroup (its limits): %v", top.Processes)
	}
	if err := f.s.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if procs := probeProcesses(t); len(procs) != 0 {
		t.Fatalf("inner processes outlive the deleted worker: %v", procs)
	}
}

// A sealed worker with DOCKER builds an image with its own engine and
// runs it, and from the host: root in the inner container is the
// worker's uid, the inner container has loopback only and reaches neither
// the host's Redis nor any engine's socket, a bind of /etc is the
// worker's own /etc, the worker's engine sees none of the host's
// containers, and the inner processes are gone once the worker is
// deleted.
func TestDockerInsideASealedWorker(t *testing.T) {
	f := newFixture(t, nil) // sealed, with the fixture's gateway
	probe := buildInnerProbe(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Capabilities: []protocol.Capability{protocol.CapDocker},
		Limits: protocol.Limits{Memory: "1g"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.s.Delete(context.WithoutCancel(ctx), info.WorkerID) })
	copyToWorker(t, info.WorkerID, probe)

	if out, err := inWorker(t, info.WorkerID, "docker build -q -t inner-probe:1 /home/worker/inner", 3*time.Minute); err != nil {
		t.Fatalf("docker build in the worker: %v\n%s", err, out)
	}
	out, err := inWorker(t, info.WorkerID, "docker run --rm -v /etc:/x inner-probe:1 "+f.rc.Options().Addr, time.Minute)
	if err != nil {
		t.Fatalf("docker run in the worker: %v\n%s", err, out)
	}
	checkInner(t, info.WorkerID, out)
	if out, err := inWorker(t, info.WorkerID, "docker run -d --name inner-sleeper inner-probe:1 sleep", time.Minute); err != nil {
		t.Fatalf("docker run -d: %v\n%s", err, out)
	}
	checkSleeper(t, f, info.WorkerID)
}

// The real claude in a sealed DOCKER worker, its Bash tool driven by the
// stub model, writes a Dockerfile, builds it and runs the image (once
// with the probe's checks, once left running): the checks above hold for
// what it ran, and the container it left running outlives the task (the
// wrapper's sweep spares the inner engine) with the worker's engine still
// answering.
func TestRealClaudeBuildsAndRunsAContainerInItsWorker(t *testing.T) {
	f := newFixture(t, nil)
	probe := buildInnerProbe(t)
	if err := os.Remove(filepath.Join(probe, "Dockerfile")); err != nil { // the agent writes it
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, AllowedCommands: []string{"*"},
		Capabilities: []protocol.Capability{protocol.CapDocker}, Limits: protocol.Limits{Memory: "1g"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.s.Delete(context.WithoutCancel(ctx), info.WorkerID) })
	copyToWorker(t, info.WorkerID, probe)
	bash := func(cmd string) stubmodel.Step {
		return stubmodel.Step{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": cmd, "description": "docker"}}}
	}
	f.stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		bash(`cd /home/worker/inner && printf 'FROM scratch\nCOPY probe /probe\nRUN ["/probe"]\nENTRYPOINT ["/probe"]\n' > Dockerfile && docker build -q -t inner-probe:1 . && echo BUILT`),
		bash("docker run --rm -v /etc:/x inner-probe:1 " + f.rc.Options().Addr + " && docker run -d --name inner-sleeper inner-probe:1 sleep && echo RAN"),
		{Text: `{"status": "complete", "result": {"ok": true}}`},
	}})
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "docker-1", Prompt: "Build the image in /home/worker/inner and run it."})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "docker-1", 4*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the task: %+v", o)
	}
	// The tool results the model was sent: the build's, then the run's.
	var results []string
	for _, r := range f.stub.Requests() {
		if n := len(r.Messages); n > 0 {
			results = append(results, string(r.Messages[n-1]))
		}
	}
	all := strings.Join(results, "\n")
	if !strings.Contains(all, "BUILT") || !strings.Contains(all, "RAN") {
		t.Fatalf("the agent's docker build and run did not succeed; the tool results:\n%s", all)
	}
	// The run's own lines, as the probe printed them, from the tool
	// result that ends with RAN (JSON-escaped: \n between them).
	var run string
	for _, r := range results {
		if i, j := strings.Index(r, "uid "), strings.Index(r, "RAN"); i >= 0 && j > i {
			run = r[i:j]
		}
	}
	if run == "" {
		t.Fatalf("no probe output in the tool results:\n%s", all)
	}
	checkInner(t, info.WorkerID, strings.ReplaceAll(run, `\n`, "\n"))
	checkSleeper(t, f, info.WorkerID)
}

// Hibernation ends a DOCKER worker's inner containers and drops its inner
// images (Podman's storage is the container's memory); the woken worker's
// engine works, empty.
func TestDockerWorkerHibernationDropsInnerContainersAndImages(t *testing.T) {
	f := newFixture(t, nil)
	f.startManager(t)
	probe := buildInnerProbe(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "inner",
		Capabilities: []protocol.Capability{protocol.CapDocker}, Limits: protocol.Limits{Memory: "1g"}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.WorkerID
	t.Cleanup(func() { _ = f.s.Delete(context.WithoutCancel(ctx), id) })
	copyToWorker(t, id, probe)
	if out, err := inWorker(t, id, "docker build -q -t inner-probe:1 /home/worker/inner && docker run -d inner-probe:1 sleep", 3*time.Minute); err != nil {
		t.Fatalf("docker build and run -d in the worker: %v\n%s", err, out)
	}
	testkit.Eventually(t, "the inner container running", 30*time.Second, func() bool { return len(probeProcesses(t)) == 1 })

	if err := f.s.Hibernate(ctx, id); err != nil {
		t.Fatal(err)
	}
	if procs := probeProcesses(t); len(procs) != 0 {
		t.Fatalf("inner processes outlive the hibernation: %v", procs)
	}
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "wake-1", Prompt: "wake"})
	if o := f.waitOutput(t, f.keys.Output(id), "wake-1", 2*time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("the task that woke it: %+v", o)
	}
	// The wrapper asks to be paused once the task is done (its cgroup
	// frozen, inner containers with it): that pause is waited for, then
	// undone, so that the look below finds it running.
	testkit.Eventually(t, "the woken worker paused after its task", 30*time.Second, func() bool {
		return f.rc.HGet(ctx, f.keys.Status(id), protocol.StatusFieldState).Val() == string(protocol.WorkerPaused)
	})
	if err := f.s.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	out, err := inWorker(t, id, "docker images -q; docker ps -aq; echo ENGINE-OK", time.Minute)
	if err != nil || !strings.Contains(out, "ENGINE-OK") {
		t.Fatalf("the woken worker's engine: %v\n%s", err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "ENGINE-OK" && !strings.HasPrefix(l, "time=") {
			t.Errorf("the woken worker's engine still has %q:\n%s", l, out)
		}
	}
}
