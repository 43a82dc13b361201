package reaper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/wrapper/internal/testbin"
)

var fakeAgent string

func TestMain(m *testing.M) {
	var dir string
	testbin.Main(func() int {
		fakeAgent = filepath.Join(dir, "fakeagent")
		return m.Run()
	}, map[string]string{"fakeagent": testbin.FakeAgent}, &dir)
}

// zombies lists the children of this process that are zombies.
func zombies(t *testing.T) []int {
	t.Helper()
	var out []int
	for pid, p := range readProcs() {
		if p.zombie && p.ppid == os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

func TestReapsHundredOrphansAndDeliversExitStatus(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	r := New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	// The helper starts 100 sleepers (half in their own session) and exits
	// at once: they are orphans that come back to this process.
	ch, err := r.Start(exec.Command(fakeAgent, "spawn-orphans", "100"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-ch:
		if st.Code != 0 || st.Signaled {
			t.Fatalf("helper exit %v", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit status for the helper")
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.Orphans() < 100 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := r.Orphans(); got != 100 {
		t.Fatalf("reaped %d orphans, want 100", got)
	}
	if z := zombies(t); len(z) > 0 {
		t.Fatalf("zombies left: %v", z)
	}

	ch, _ = r.Start(exec.Command("/bin/sh", "-c", "exit 7"))
	if st := <-ch; st.Code != 7 {
		t.Fatalf("exit %v, want 7", st)
	}
	cmd := exec.Command("/bin/sh", "-c", "kill -TERM $$")
	ch, _ = r.Start(cmd)
	if st := <-ch; !st.Signaled || st.Code != 143 {
		t.Fatalf("exit %v, want SIGTERM (143)", st)
	}
	if _, err := r.Start(exec.Command("/nonexistent")); err == nil {
		t.Fatal("starting a missing program gave no error")
	}
}

// ReapAll returns once every child, and every orphan of a killed one, is
// collected: as PID 1 does after it killed every other process of its
// container, before it re-executes itself.
func TestReapAllReturnsOnceNoChildIsLeft(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Fatal(err)
	}
	r := New()
	var pids []int
	for i := 0; i < 3; i++ {
		// A shell whose own child outlives it: an orphan to collect.
		cmd := exec.Command("sh", "-c", "sleep 30 & echo $!; wait")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Start(cmd); err != nil {
			t.Fatal(err)
		}
		var grandchild int
		if _, err := fmt.Fscan(out, &grandchild); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid, grandchild)
	}
	if r.ReapAll(50 * time.Millisecond) {
		t.Fatal("ReapAll reported no child left while six run")
	}
	start := time.Now()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if !r.ReapAll(5 * time.Second) {
		t.Fatal("children left 5 s after they were killed")
	}
	t.Logf("every child and orphan collected %v after the kill", time.Since(start))
	if _, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); !errors.Is(err, syscall.ECHILD) {
		t.Fatalf("wait4 after ReapAll: %v, want ECHILD", err)
	}
}
