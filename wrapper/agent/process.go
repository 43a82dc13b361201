package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code     int            // exit code; 128+signal when Signaled
	Signaled bool           // killed by a signal
	Signal   syscall.Signal // the signal, when Signaled
}

func (e ExitStatus) String() string {
	if e.Signaled {
		return fmt.Sprintf("killed by signal %d (%s)", int(e.Signal), e.Signal)
	}
	return fmt.Sprintf("exit code %d", e.Code)
}

// FromWaitStatus converts a wait status.
func FromWaitStatus(ws syscall.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Code: 128 + int(ws.Signal()), Signaled: true, Signal: ws.Signal()}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// Starter starts a command and reports its exit exactly once on the
// returned channel. The wrapper's reaper implements it, because as PID 1
// (or a subreaper) it reaps every child itself, and so must be the one that
// hands each exit status to whoever waits for it.
type Starter interface {
	Start(cmd *exec.Cmd) (<-chan ExitStatus, error)
}

// DirectStarter waits for the process itself; for use where nothing else
// reaps children.
type DirectStarter struct{}

// Start implements Starter.
func (DirectStarter) Start(cmd *exec.Cmd) (<-chan ExitStatus, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan ExitStatus, 1)
	go func() {
		st, err := cmd.Process.Wait()
		if err != nil {
			ch <- ExitStatus{Code: -1}
			return
		}
		ch <- FromWaitStatus(st.Sys().(syscall.WaitStatus))
	}()
	return ch, nil
}

// StartErrorCode gives the shell's exit code for a command that could not
// be started: 127 when the program does not exist, 126 when it exists but
// cannot be executed.
func StartErrorCode(err error) int {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return 127
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EACCES):
		return 126
	}
	return 126
}

// signalGroup sends sig to the process group pgid; a group that is gone is
// not an error.
func signalGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}
