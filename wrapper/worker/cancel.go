package worker

import (
	"log/slog"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Cancel documents ride on the input stream beside the tasks. The task
// loop reads them in their turn, through the consumer group, but the
// task they name is often running then, or read before them: so the
// wrapper also follows its input outside the group, and looks ahead of
// each task it reads (input.go). Whichever sees a cancel first notes it
// here; a noted cancel interrupts the task in flight, or answers a task
// read later at once, without running it.

// cancelNoteTTL bounds how long a cancel of a task not seen yet is kept
// in memory: its task is expected within moments, not hours.
const cancelNoteTTL = time.Hour

// maxCancelNotes bounds the notes kept; the oldest go first.
const maxCancelNotes = 10000

// cancelNote is a cancel seen for a request.
type cancelNote struct {
	reason string
	at     time.Time
}

// cancels are the cancels seen, by request id.
type cancels struct {
	state *workerState
	log   *slog.Logger
	now   func() time.Time

	mu    sync.Mutex // guards notes
	notes map[string]cancelNote
}

// note records a cancel and, when it names the task in flight,
// interrupts it.
func (c *cancels) note(cn protocol.Cancel) {
	now := c.now()
	c.mu.Lock()
	if c.notes == nil {
		c.notes = map[string]cancelNote{}
	}
	if _, seen := c.notes[cn.RequestID]; !seen && len(c.notes) >= maxCancelNotes {
		c.pruneLocked(now, true)
	}
	c.notes[cn.RequestID] = cancelNote{reason: cn.Reason, at: now}
	c.mu.Unlock()
	// A task that starts after the note takes it (take); one that started
	// before is the task in flight by now.
	if cur := c.state.currentOf(cn.RequestID); cur != nil && cur.cancel.cancel(cn.Reason) {
		c.log.Info("cancel: interrupting the task in flight", "request_id", cn.RequestID)
	}
}

// take marks cur cancelled when a cancel of its request was noted before
// it started.
func (c *cancels) take(cur *current) {
	c.mu.Lock()
	n, ok := c.notes[cur.task.RequestID]
	c.mu.Unlock()
	if ok {
		cur.cancel.cancel(n.reason)
	}
}

// pruneLocked forgets expired notes; with full, the oldest half too.
func (c *cancels) pruneLocked(now time.Time, full bool) {
	for id, n := range c.notes {
		if now.Sub(n.at) > cancelNoteTTL {
			delete(c.notes, id)
		}
	}
	if !full || len(c.notes) < maxCancelNotes {
		return
	}
	cut := now
	for _, n := range c.notes {
		if n.at.Before(cut) {
			cut = n.at
		}
	}
	mid := cut.Add(now.Sub(cut) / 2)
	for id, n := range c.notes {
		if !n.at.After(mid) {
			delete(c.notes, id)
		}
	}
}

// interruptible is what a cancel, or an abort of the wrapper's own, needs
// of a task in flight.
type interruptible struct {
	interrupt chan struct{} // closed by a cancel or an abort; the agent's Spec.Interrupt

	mu        sync.Mutex // guards the fields below
	cancelled bool
	reason    string
	// abort is why the wrapper itself interrupted the task (AUTH_FAILED,
	// RATE_LIMITED, BUDGET_EXCEEDED): the task fails with it.
	abort *protocol.Error
}

func newInterruptible() *interruptible { return &interruptible{interrupt: make(chan struct{})} }

// cancel marks the task cancelled and interrupts its agent, once, unless
// an abort came first. It reports whether it did.
func (c *interruptible) cancel(reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled || c.abort != nil {
		return false
	}
	c.cancelled, c.reason = true, reason
	close(c.interrupt)
	return true
}

// abortWith interrupts the agent for a failure the wrapper saw, once,
// unless a cancel came first. It reports whether it did.
func (c *interruptible) abortWith(e *protocol.Error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled || c.abort != nil {
		return false
	}
	c.abort = e
	close(c.interrupt)
	return true
}

// channel is what the agent's Spec.Interrupt waits on.
func (c *interruptible) channel() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.interrupt
}

// rearm readies the task for another attempt after the wrapper's abort
// ended the one before (a rate limit past its timeout): the abort is
// forgotten and a new channel waits for the next interrupt. It reports
// false, leaving all as it is, when a cancel came.
func (c *interruptible) rearm() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled {
		return false
	}
	if c.abort != nil {
		c.abort, c.interrupt = nil, make(chan struct{})
	}
	return true
}

// state is whether a cancel came, its reason, and the wrapper's abort.
func (c *interruptible) state() (cancelled bool, reason string, abort *protocol.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelled, c.reason, c.abort
}
