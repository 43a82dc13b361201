package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The Docker engine is shared by the test binaries of every package, which
// run at the same time; a test that restarts the engine must not pull it
// from under the others. Every test that uses the engine holds a shared
// lock on this file until it ends (RequireDocker takes it); RestartEngine
// takes it exclusively.
const engineLockPath = "/tmp/agentvisor-test-engine.lock"

var engineOwner struct {
	sync.Mutex
	exclusive bool // this process holds the exclusive lock
}

func lockFile(t testing.TB, how int) {
	t.Helper()
	unlock, err := flockEngine(how)
	if err != nil {
		t.Fatalf("testkit: engine lock: %v", err)
	}
	t.Cleanup(unlock)
}

func flockEngine(how int) (unlock func(), err error) {
	f, err := os.OpenFile(engineLockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// ShareEngineLock takes the shared lock the tests hold on the engine, for
// a program that is no test (the fault suite's fleet): a test that
// restarts the engine waits until unlock.
func ShareEngineLock() (unlock func(), err error) { return flockEngine(syscall.LOCK_SH) }

// shareEngine takes the shared lock for the rest of the test, unless this
// process restarts the engine (then it has it exclusively already).
func shareEngine(t testing.TB) {
	engineOwner.Lock()
	excl := engineOwner.exclusive
	engineOwner.Unlock()
	if !excl {
		lockFile(t, syscall.LOCK_SH)
	}
}

// ExclusiveEngine gives the test the engine to itself: it waits for every
// other test using the engine (in any test binary) to end, and holds them
// off until it ends. Call it first, before anything uses the engine; the
// test may then RestartEngine. When the test ends the engine runs again,
// whatever happened (root is the repository's top directory, for
// scripts/setup.sh).
func ExclusiveEngine(t testing.TB, root string) {
	t.Helper()
	engineOwner.Lock()
	engineOwner.exclusive = true
	engineOwner.Unlock()
	lockFile(t, syscall.LOCK_EX)
	// Registered after the lock's cleanup, so it runs before the unlock.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if PingDocker(ctx) != nil {
			_ = startEngine(root)
		}
		engineOwner.Lock()
		engineOwner.exclusive = false
		engineOwner.Unlock()
	})
}

func startEngine(root string) error {
	out, err := exec.Command("bash", root+"/scripts/setup.sh").CombinedOutput()
	if err != nil {
		return fmt.Errorf("setup.sh: %v\n%s", err, out)
	}
	return nil
}

// RestartEngine stops the Docker engine with sig (SIGTERM, as a host
// shutdown or a package upgrade would: it stops the containers first;
// SIGKILL, a crash: the containers outlive it and the restarted engine
// kills them), calls whileDown, and starts the engine again with the
// project's set-up script. The test must hold ExclusiveEngine.
func RestartEngine(t testing.TB, root string, sig syscall.Signal, whileDown func()) {
	t.Helper()
	engineOwner.Lock()
	excl := engineOwner.exclusive
	engineOwner.Unlock()
	if !excl {
		t.Fatal("testkit: RestartEngine without ExclusiveEngine")
	}
	b, err := os.ReadFile("/var/run/docker.pid")
	if err != nil {
		t.Fatalf("testkit: the engine's pid file: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("testkit: stop dockerd (pid %d): %v", pid, err)
	}
	for deadline := time.Now().Add(90 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("testkit: dockerd (pid %d) did not stop within 90 s", pid)
		}
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
			break // a zombie: gone, only not reaped by its parent
		}
	}
	if whileDown != nil {
		whileDown()
	}
	if err := startEngine(root); err != nil {
		t.Fatal(err)
	}
}
