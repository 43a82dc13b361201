package reaper

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	me := strconv.Itoa(os.Getpid())
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		rest := s[strings.LastIndexByte(s, ')')+2:]
		f := strings.Fields(rest)
		if len(f) > 1 && f[0] == "Z" && f[1] == me {
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
