// Package reaper does what PID 1 owes its container: it reaps every child
// that exits, the agent's orphans included, and hands the exit status of
// the processes it started to whoever waits for them.
//
// A process that reaps with wait4(-1) must not let anything else wait for
// its children (os/exec's Wait would race it for the status), so every
// child of the wrapper is started through Reaper.Start.
package reaper

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// Reaper reaps children and delivers the exit status of started ones.
type Reaper struct {
	mu      sync.Mutex // held across Start and each reaping pass, so that a pid is registered before it can be reaped
	waiting map[int]chan agent.ExitStatus
	orphans atomic.Int64
	// clock anchors /proc's start times (clock ticks after boot) to wall
	// time: this process's own start, and the wall time New saw.
	clock procClock
}

var _ agent.Starter = (*Reaper)(nil)

// New returns a Reaper; call Run to start reaping.
func New() *Reaper { return &Reaper{waiting: map[int]chan agent.ExitStatus{}, clock: newProcClock()} }

// BecomeSubreaper makes this process the reaper of its orphaned
// descendants when it is not PID 1 (outside a container, in tests), so that
// the agent's orphans come back to it instead of to the system's init.
func BecomeSubreaper() error {
	if os.Getpid() == 1 {
		return nil
	}
	if err := prctl(prSetChildSubreaper, 1); err != nil {
		return errors.New("reaper: PR_SET_CHILD_SUBREAPER: " + err.Error())
	}
	return nil
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>; the
// syscall package does not name it.
const prSetChildSubreaper = 36

func prctl(option, arg2 uintptr) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, option, arg2, 0); e != 0 {
		return e
	}
	return nil
}

// Start starts cmd and returns a channel that receives its exit status once.
func (r *Reaper) Start(cmd *exec.Cmd) (<-chan agent.ExitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan agent.ExitStatus, 1)
	r.waiting[cmd.Process.Pid] = ch
	return ch, nil
}

// Orphans returns how many processes it reaped that it had not started.
func (r *Reaper) Orphans() int64 { return r.orphans.Load() }

// Run reaps on every SIGCHLD, and every 10 s in case a signal was
// coalesced, until ctx ends.
func (r *Reaper) Run(ctx context.Context) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		r.Reap()
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		case <-tick.C:
		}
	}
}

// Reap collects every child that has exited (wait4(-1, WNOHANG) until none
// is left) and returns how many it collected.
func (r *Reaper) Reap() int {
	n, _ := r.reap()
	return n
}

// ReapAll reaps until this process has no child left, or timeout passes,
// and reports whether none is left: after a kill of every other process
// of the container, it returns once they are all gone (each reparented to
// PID 1 and collected), not after a guess at how long that takes.
func (r *Reaper) ReapAll(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if _, none := r.reap(); none {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// reap is Reap, and reports whether no child is left at all (ECHILD).
func (r *Reaper) reap() (n int, none bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 { // ECHILD: no children; 0: none exited
			return n, errors.Is(err, syscall.ECHILD)
		}
		n++
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- agent.FromWaitStatus(ws)
			continue
		}
		r.orphans.Add(1)
	}
}
