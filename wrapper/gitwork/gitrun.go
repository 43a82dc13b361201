package gitwork

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// How git runs: through the worker's Starter. The wrapper is PID 1 (or a
// subreaper) and reaps every child itself, so nothing else may wait for
// one (os/exec's Wait would race the reaper for its status): a git
// command is started by the reaper, its exit status read from the
// channel it gives, its output read from pipes of its own until they
// close. Each command is a process group of its own, killed whole when
// its context ends (git runs helpers: git-remote-http, pack-objects).

// gitExit is a git command that ended with a code other than 0: the code,
// and what it said on stderr.
type gitExit struct {
	code   int
	stderr string
}

func (e *gitExit) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.stderr
}

// pipeDrain bounds the wait for a command's pipes to close once it has
// exited (a helper it left behind that holds them).
const pipeDrain = 5 * time.Second

// exec runs git with args in dir, its stdout written to stdout (nil:
// discarded); it returns a *gitExit for an exit code other than 0.
func (w *Work) exec(ctx context.Context, dir string, stdout io.Writer, extraEnv []string, args ...string) error {
	full := append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "advice.detachedHead=false"}, args...)
	cmd := exec.Command("git", full...)
	cmd.Dir = dir
	cmd.Env = append(append(append([]string{}, w.p.Env...), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=true", "LC_ALL=C"), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	exits, err := w.p.Starter.Start(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return fmt.Errorf("start git: %w", err)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	stderr := &boundedBuffer{max: 4 << 10}
	drained := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(stdout, outR); drained <- struct{}{} }()
	go func() { _, _ = io.Copy(stderr, errR); drained <- struct{}{} }()
	var st agent.ExitStatus
	select {
	case st = <-exits:
	case <-ctx.Done():
		// The process is not reaped before its status is on exits: its
		// group's id is still its own.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		st = <-exits
	}
	timer := time.NewTimer(pipeDrain)
	defer timer.Stop()
	for range 2 {
		select {
		case <-drained:
		case <-timer.C:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // a helper left holding the pipes
		}
	}
	outR.Close()
	errR.Close()
	if ctx.Err() != nil {
		return fmt.Errorf("git %s: %w", args[0], ctx.Err())
	}
	if st.Code != 0 || st.Signaled {
		return &gitExit{code: st.Code, stderr: strings.TrimSpace(string(stderr.buf))}
	}
	return nil
}

// run runs git in the worktree, locally: its stdout.
func (w *Work) run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	err := w.exec(ctx, w.Dir, &out, nil, args...)
	return out.String(), err
}

// netRun runs a git command that reaches the remote, bounded by Timeout.
func (w *Work) netRun(ctx context.Context, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, w.p.Timeout)
	defer cancel()
	var out bytes.Buffer
	err := w.exec(ctx, dir, &out, nil, args...)
	return out.String(), err
}
