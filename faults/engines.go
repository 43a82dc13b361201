package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// An Engine is the Docker engine of a simulated host: a dockerd of its
// own beside the machine's default engine, with its own socket, data root,
// exec root and pid file, and the safe flags of scripts/setup.sh
// (--bridge=none --iptables=false --ip-masq=false). Each dockerd starts its
// own containerd (its config, socket, root and state live under the exec
// and data roots), so two engines share no container state; their shims'
// sockets are named after their containerd's address.
//
// Everything of the host runs in one cgroup subtree (cgroup v1):
// dockerd is started inside it, so containerd and the shims inherit it;
// the containers are put below it by --cgroup-parent; the host's manager
// is moved into it by Adopt. Kill freezes the subtree and SIGKILLs every
// process in it, as a machine that loses power: nothing of the host runs
// a moment longer than the rest, and nothing of it cleans up.
type Engine struct {
	Name string // the host's name (its HOST_ID)
	Dir  string // data-root, exec-root, pid file, socket and log live here
	// Cgroup is the host's cgroup, relative to each v1 hierarchy's root;
	// the containers go to Cgroup/containers.
	Cgroup string

	cmd    *exec.Cmd
	done   chan struct{}
	killed bool // by Kill: the next Start is a boot after a crash
}

// cgroupRoot is where the v1 hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// engineHierarchies are the v1 hierarchies the host's own processes
// (dockerd, containerd, the shims, the manager) are moved into: freezer to
// freeze and enumerate the whole host, cpuacct to count its CPU.
var engineHierarchies = []string{"freezer", "cpuacct"}

// EnginesBase is the directory under which every engine of this machine's
// fleets lives, one directory per fleet (so that a fleet left by a killed
// process is found and swept).
func EnginesBase() string { return filepath.Join(os.TempDir(), "agentvisor-fleet") }

// Host returns the engine's DOCKER_HOST.
func (e *Engine) Host() string { return "unix://" + e.socket() }

func (e *Engine) socket() string  { return filepath.Join(e.Dir, "docker.sock") }
func (e *Engine) pidFile() string { return filepath.Join(e.Dir, "docker.pid") }
func (e *Engine) logFile() string { return filepath.Join(e.Dir, "dockerd.log") }
func (e *Engine) dataRoot() string {
	return filepath.Join(e.Dir, "data")
}
func (e *Engine) execRoot() string { return filepath.Join(e.Dir, "exec") }

// RequireDockerd returns an error naming what to do when dockerd is not
// installed: the fleet cannot be simulated without it.
func RequireDockerd() error {
	if _, err := exec.LookPath("dockerd"); err != nil {
		return fmt.Errorf("faults: dockerd is not installed (run `make setup`): %w", err)
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "freezer")); err != nil {
		return fmt.Errorf("faults: the fleet harness needs the cgroup v1 freezer hierarchy at %s/freezer: %w", cgroupRoot, err)
	}
	return nil
}

// NewEngine prepares an engine named name under dir (not started yet);
// cgroup names its cgroup, unique on the machine.
func NewEngine(dir, name, cgroup string) (*Engine, error) {
	e := &Engine{Name: name, Dir: dir, Cgroup: cgroup}
	for _, d := range []string{e.dataRoot(), e.execRoot()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Start starts dockerd (again, after Kill or Stop: same roots, so the
// engine finds its images and the containers of its last life, stopped)
// and waits until it answers, 60 s at most.
func (e *Engine) Start() error {
	if e.Running() {
		return fmt.Errorf("faults: engine %s runs already", e.Name)
	}
	for _, h := range engineHierarchies {
		if err := os.MkdirAll(filepath.Join(cgroupRoot, h, e.Cgroup), 0o755); err != nil {
			return fmt.Errorf("faults: engine %s: cgroup: %w", e.Name, err)
		}
	}
	// After a kill, the host boots again: what a reboot clears is gone
	// (the mounts, the exec root: /run is a tmpfs on a real machine), the
	// data root is kept. containerd's pid file would name a process that
	// may still be an unreaped zombie, which dockerd takes for a live
	// containerd and waits on.
	if e.killed {
		unmountUnder(e.Dir)
		if err := os.RemoveAll(e.execRoot()); err != nil {
			return fmt.Errorf("faults: engine %s: clear the exec root: %w", e.Name, err)
		}
		if err := os.MkdirAll(e.execRoot(), 0o700); err != nil {
			return err
		}
		e.killed = false
	}
	_ = os.Remove(e.pidFile())
	_ = os.Remove(e.socket())
	logf, err := os.OpenFile(e.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := []string{
		"--host", e.Host(), "--data-root", e.dataRoot(), "--exec-root", e.execRoot(), "--pidfile", e.pidFile(),
		"--bridge=none", "--iptables=false", "--ip-masq=false",
		"--cgroup-parent", "/" + e.Cgroup + "/containers",
		// Not the machine's /etc/docker/daemon.json: its settings (a
		// socket, a data root) are the default engine's.
		"--config-file", filepath.Join(e.Dir, "daemon.json"),
	}
	// live-restore as the default engine has it (scripts/setup.sh): the
	// containers outlive a restart of dockerd.
	if err := os.WriteFile(filepath.Join(e.Dir, "daemon.json"), []byte(`{"live-restore": true}`+"\n"), 0o644); err != nil {
		logf.Close()
		return err
	}
	// dockerd is moved into the host's cgroups before it runs: the shell
	// writes its own pid there, then becomes dockerd, so containerd and
	// every shim start inside them.
	var moves []string
	for _, h := range engineHierarchies {
		moves = append(moves, "echo $$ > "+shellQuote(filepath.Join(cgroupRoot, h, e.Cgroup, "cgroup.procs")))
	}
	script := strings.Join(moves, " && ") + ` && exec dockerd "$@"`
	cmd := exec.Command("sh", append([]string{"-c", script, "dockerd"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a terminal's Ctrl-C is for the harness, which
	// stops its engines in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("faults: start dockerd %s: %w", e.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	e.cmd, e.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := e.Docker("version", "-f", "{{.Server.Version}}"); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("faults: dockerd %s exited at start; its log:\n%s", e.Name, e.LogTail(20))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faults: dockerd %s did not answer within 60 s; its log:\n%s", e.Name, e.LogTail(20))
		}
	}
}

// Running reports whether its dockerd process has not exited.
func (e *Engine) Running() bool {
	if e.done == nil {
		return false
	}
	select {
	case <-e.done:
		return false
	default:
		return true
	}
}

// Docker runs the docker CLI against this engine, with DockerTimeout.
func (e *Engine) Docker(args ...string) ([]byte, error) {
	return e.DockerCtx(context.Background(), args...)
}

// DockerCtx is Docker under ctx (and DockerTimeout).
func (e *Engine) DockerCtx(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, DockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append([]string{"-H", e.Host()}, args...)...)
	return cmd.CombinedOutput()
}

// Adopt moves a process (the host's manager) into the host's cgroups, so
// that Kill takes it with the rest.
func (e *Engine) Adopt(pid int) error {
	for _, h := range engineHierarchies {
		p := filepath.Join(cgroupRoot, h, e.Cgroup, "cgroup.procs")
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("faults: adopt %d into %s: %w", pid, p, err)
		}
	}
	return nil
}

// Pids returns every process of the host: its cgroup subtree in the
// freezer hierarchy (dockerd, containerd, shims, containers, the adopted
// manager).
func (e *Engine) Pids() []int {
	var pids []int
	for _, dir := range cgroupDirs(filepath.Join(cgroupRoot, "freezer", e.Cgroup)) {
		pids = append(pids, readPids(filepath.Join(dir, "cgroup.procs"))...)
	}
	return pids
}

// CPUTime is the CPU the host's processes used since its cgroup was made
// (cpuacct: dockerd, containerd, shims and the adopted manager; the
// containers count under Cgroup/containers, which is included).
func (e *Engine) CPUTime() time.Duration {
	b, err := os.ReadFile(filepath.Join(cgroupRoot, "cpuacct", e.Cgroup, "cpuacct.usage"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(n)
}

// Kill is the host's death: its cgroup subtree is frozen (no process of
// it runs another instruction), every process in it gets SIGKILL, and the
// subtree is thawed so that they die. Containers paused by the engine
// have frozen cgroups of their own, thawed too. It returns when the
// freeze took hold (the moment of death) and waits, 30 s at most, until no
// process of the host is left.
func (e *Engine) Kill() (time.Time, error) {
	root := filepath.Join(cgroupRoot, "freezer", e.Cgroup)
	state := filepath.Join(root, "freezer.state")
	if err := os.WriteFile(state, []byte("FROZEN"), 0o644); err != nil {
		return time.Time{}, fmt.Errorf("faults: freeze host %s: %w", e.Name, err)
	}
	// A task in an uninterruptible sleep delays the freeze; the kill goes
	// on after 2 s all the same.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(state); strings.TrimSpace(string(b)) == "FROZEN" {
			break
		}
	}
	at := time.Now()
	e.killed = true
	for _, pid := range e.Pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		dirs := cgroupDirs(root)
		for _, d := range dirs {
			_ = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0o644)
		}
		left := e.Pids()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return at, fmt.Errorf("faults: host %s: processes %v still alive 30 s after SIGKILL", e.Name, left)
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e.done != nil {
		<-e.done
	}
	return at, nil
}

// Stop stops dockerd as a supervisor does (SIGTERM: it stops its running
// containers first), SIGKILLs what of the host is left after bound, and
// waits for it.
func (e *Engine) Stop(bound time.Duration) error {
	if e.Running() {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(bound):
		}
	}
	if len(e.Pids()) > 0 {
		if _, err := e.Kill(); err != nil {
			return err
		}
	}
	return nil
}

// KillDaemon is a crash of the engine alone (as an upgrade that kills
// it, or the OOM killer): dockerd gets SIGKILL; containerd, the shims and
// the containers are left running (live-restore). Start brings dockerd
// back over them.
func (e *Engine) KillDaemon() (time.Time, error) {
	if !e.Running() {
		return time.Time{}, fmt.Errorf("faults: engine %s does not run", e.Name)
	}
	at := time.Now()
	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return at, fmt.Errorf("faults: kill dockerd %s: %w", e.Name, err)
	}
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		return at, fmt.Errorf("faults: dockerd %s did not exit within 10 s of SIGKILL", e.Name)
	}
	return at, nil
}

// Remove stops the engine, then removes every trace of it: the mounts it
// left under its directory (after a kill: overlays, shm, network
// namespaces), its cgroups in every hierarchy, and its directory.
func (e *Engine) Remove() error {
	errs := []error{e.Stop(30 * time.Second)}
	unmountUnder(e.Dir)
	errs = append(errs, removeCgroups(e.Cgroup))
	if err := os.RemoveAll(e.Dir); err != nil {
		errs = append(errs, fmt.Errorf("faults: remove %s: %w", e.Dir, err))
	}
	return errors.Join(errs...)
}

// Load loads an image archive (docker save) into the engine.
func (e *Engine) Load(archive string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "-H", e.Host(), "load", "-q", "-i", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("faults: docker load into %s: %v\n%s", e.Name, err, out)
	}
	return nil
}

// LogTail returns the last n lines of the engine's dockerd log.
func (e *Engine) LogTail(n int) string {
	b, _ := os.ReadFile(e.logFile())
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cgroupDirs returns dir and every cgroup below it, parents first.
func cgroupDirs(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func readPids(path string) []int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// removeCgroups removes the cgroup rel (and the cgroups below it) from
// every v1 hierarchy: runc makes the containers' in all of them.
func removeCgroups(rel string) error {
	hs, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		dirs := cgroupDirs(filepath.Join(cgroupRoot, h.Name(), rel))
		for i := len(dirs) - 1; i >= 0; i-- { // children first
			// A cgroup is removed by rmdir only; its control files go with it.
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("faults: rmdir %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
