package faults

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/testkit"
)

// TestEngineKillLeavesNothing checks the fleet harness itself (no row of
// FAULTS.md): an engine of its own runs a container and a paused one; the
// host's Kill leaves no process of it (dockerd, containerd, shims,
// containers, an adopted process); the engine restarted finds both
// containers exited; Remove leaves no mount, cgroup or directory.
func TestEngineKillLeavesNothing(t *testing.T) {
	testkit.RequireDocker(t)
	ensureBuilt(t)
	f, err := NewFleet(1, BaseImage)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			f.Close()
		}
	})
	h := f.Hosts[0]
	run := func(name string) {
		if out, err := h.Engine.Docker("run", "-d", "--name", name, "--network", "host", "--entrypoint", FakeAgent, BaseImage, "sleep-ms", "600000"); err != nil {
			t.Fatalf("docker run %s: %v\n%s", name, err, out)
		}
	}
	run("running")
	run("paused")
	if out, err := h.Engine.Docker("pause", "paused"); err != nil {
		t.Fatalf("docker pause: %v\n%s", err, out)
	}
	// A process standing for the host's manager.
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := h.Engine.Adopt(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids := h.Engine.Pids()
	// dockerd, containerd, 2 shims, 2 container processes, the sleeper.
	if len(pids) < 7 {
		t.Fatalf("the host's cgroup holds %d processes, want at least 7: %v", len(pids), pids)
	}
	at, err := h.Engine.Kill()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %d processes in %s", len(pids), time.Since(at).Round(time.Millisecond))
	_ = sleeper.Wait()
	for _, pid := range pids {
		if Alive(pid) {
			t.Errorf("process %d of the killed host still runs", pid)
		}
	}
	if err := h.Engine.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := h.Engine.Docker("ps", "-a", "--format", "{{.Names}} {{.State}}")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"running", "paused"} {
		if !strings.Contains(string(out), name+" exited") {
			t.Errorf("after the restart, container %s is not exited:\n%s", name, out)
		}
	}
	cg, dir := h.Engine.Cgroup, f.Dir
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	closed = true
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is left: %v", dir, err)
	}
	if m, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", cg)); len(m) > 0 {
		t.Errorf("cgroups left: %v", m)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), dir) {
		t.Errorf("mounts left under %s", dir)
	}
}
