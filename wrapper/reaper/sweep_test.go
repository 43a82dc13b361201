package reaper

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	p, ok := parseStat(pid, b)
	return ok && !p.zombie
}

// readPID waits for a shell to write a pid into path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil {
				return pid
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// A sweep kills what a task left (in another session, in the agent's
// group once the agent is gone), and spares the agent while it runs, its
// group's members and what ran before the task began.
func TestSweepKillsATasksProcessesWhereverTheyWent(t *testing.T) {
	r := runningReaper(t)
	dir := t.TempDir()
	pidfile := func(name string) string { return filepath.Join(dir, name) }

	// Before the task: a sleeper in a session of its own, its parent gone.
	before, err := r.Start(exec.Command("sh", "-c", "setsid sleep 60 & echo $! >"+pidfile("before")))
	if err != nil {
		t.Fatal(err)
	}
	<-before
	old := readPID(t, pidfile("before"))
	t.Cleanup(func() { _ = syscall.Kill(old, syscall.SIGKILL) })
	time.Sleep(30 * time.Millisecond) // past the tick of its start
	since := time.Now()

	// The task's agent: one sleeper in a session of its own, one in its
	// group; the agent itself waits.
	agentCmd := exec.Command("sh", "-c", "setsid sleep 61 & echo $! >"+pidfile("setsid")+"; sleep 62 & echo $! >"+pidfile("group")+"; exec sleep 63")
	agentCmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, err := r.Start(agentCmd)
	if err != nil {
		t.Fatal(err)
	}
	detached, sibling := readPID(t, pidfile("setsid")), readPID(t, pidfile("group"))
	t.Cleanup(func() {
		_ = syscall.Kill(-agentCmd.Process.Pid, syscall.SIGKILL)
		_ = syscall.Kill(detached, syscall.SIGKILL)
	})

	// A cancel's sweep, the agent still running.
	if n := r.Sweep(since); n != 1 {
		t.Errorf("the sweep while the agent runs killed %d processes, want 1 (the one in its own session)", n)
	}
	waitFor(t, "the setsid sleeper killed", func() bool { return !alive(detached) })
	if !alive(agentCmd.Process.Pid) || !alive(sibling) {
		t.Fatal("the sweep killed the agent or a member of its group while it runs")
	}

	// The task's end: the agent gone, its group's sleeper is a stray.
	_ = syscall.Kill(agentCmd.Process.Pid, syscall.SIGTERM)
	<-exited
	if n := r.Sweep(since); n != 1 {
		t.Errorf("the sweep after the agent exited killed %d processes, want 1", n)
	}
	waitFor(t, "the agent's group sleeper killed", func() bool { return !alive(sibling) })
	if !alive(old) {
		t.Fatal("the sweep killed a process that ran before the task began")
	}
	if n := r.Sweep(since); n != 0 {
		t.Errorf("a second sweep killed %d processes, want 0", n)
	}
}

// A process a task left in a user namespace of its own (a DOCKER
// worker's inner engine and containers) outlives the sweep; one beside
// it in this process's namespace does not.
func TestSweepSparesProcessesInAnotherUserNamespace(t *testing.T) {
	r := runningReaper(t)
	dir := t.TempDir()
	since := time.Now()
	done, err := r.Start(exec.Command("sh", "-c", "setsid unshare --user sleep 64 & echo $! >"+filepath.Join(dir, "userns")+
		"; setsid sleep 65 & echo $! >"+filepath.Join(dir, "plain")))
	if err != nil {
		t.Fatal(err)
	}
	<-done
	inner, plain := readPID(t, filepath.Join(dir, "userns")), readPID(t, filepath.Join(dir, "plain"))
	t.Cleanup(func() { _ = syscall.Kill(inner, syscall.SIGKILL); _ = syscall.Kill(plain, syscall.SIGKILL) })
	waitFor(t, "the sleeper in its user namespace", func() bool {
		own, _ := os.Readlink("/proc/self/ns/user")
		return otherUserNS(inner, own)
	})
	if n := r.Sweep(since); n != 1 {
		t.Errorf("the sweep killed %d processes, want 1", n)
	}
	waitFor(t, "the plain sleeper killed", func() bool { return !alive(plain) })
	if !alive(inner) {
		t.Fatal("the sweep killed the process in another user namespace")
	}
}

// A process that forks while it is swept leaves nothing either.
func TestSweepOutlastsAForkingProcess(t *testing.T) {
	r := runningReaper(t)
	since := time.Now()
	// The agent leaves a shell in a session of its own that starts a
	// sleeper every 10 ms, and exits.
	ch, err := r.Start(exec.Command("sh", "-c", "setsid sh -c 'while :; do sleep 60 & sleep 0.01; done' &"))
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	time.Sleep(200 * time.Millisecond)
	if n := r.Sweep(since); n < 2 {
		t.Errorf("the sweep killed %d processes, want the shell and its sleepers", n)
	}
	waitFor(t, "no process of the forking shell left", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.strays(0)) == 0
	})
}

// runningReaper makes this process a subreaper and reaps until the test
// ends.
func runningReaper(t *testing.T) *Reaper {
	t.Helper()
	if err := BecomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	r := New()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	return r
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
