package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"time"
)

// conversationOpenTimeout bounds the wait for a conversation's opening
// (ACP's initialize and session): an agent loads its configuration and
// tools first.
const conversationOpenTimeout = 60 * time.Second

// runConversation is Run for an agent that takes its prompt on a control
// channel (Spec.Converse): one persistent process, opened, given the one
// message, then closed. A session to resume that the agent does not have
// gives a failed result of no turns, as a failed resume of the other
// agents does, so that the session policy runs the task in a new session.
// A cancel or an interrupt while the agent opens its session kills it: the
// outcome is Cancelled or Interrupted, with no result.
func runConversation(ctx context.Context, spec Spec) Outcome {
	start := time.Now()
	spec.Dialect, spec.Parser = spec.Converse()
	proc, err := StartPersistent(spec)
	if err != nil {
		return Outcome{StartErr: err, Exit: ExitStatus{Code: StartErrorCode(err)}, Duration: time.Since(start)}
	}
	open := conversationOpenTimeout
	if spec.Timeout > 0 {
		open = min(open, spec.Timeout)
	}
	var cancelled, interrupted atomic.Bool
	opened := make(chan struct{})
	go func() { // a cancel while the agent boots need not wait for it
		select {
		case <-ctx.Done():
			cancelled.Store(true)
		case <-spec.Interrupt:
			interrupted.Store(true)
		case <-opened:
			return
		}
		signalGroup(proc.pgid, syscall.SIGKILL)
	}()
	err = proc.Open(open)
	close(opened)
	if err != nil {
		proc.Close()
		out := Outcome{Init: proc.init, Cancelled: cancelled.Load(), Interrupted: interrupted.Load(), Duration: time.Since(start)}
		if !out.Cancelled && !out.Interrupted {
			out.Result = &Result{IsError: true, Subtype: "error", Text: err.Error()}
		}
		if !errors.Is(err, ErrSessionNotFound) {
			out.Exit, out.Stderr = proc.exit, proc.stderr.String()
		}
		return out
	}
	defer proc.Close()
	if spec.OnProcess != nil {
		spec.OnProcess(proc)
	}
	timeout := spec.Timeout
	if timeout > 0 {
		timeout = max(timeout-time.Since(start), time.Millisecond)
	}
	out := proc.SendInterruptible(ctx, proc.Message(string(spec.Stdin)), timeout, spec.Interrupt, spec.OnEvent)
	out.Duration = time.Since(start)
	return out
}
