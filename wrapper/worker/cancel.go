package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Cancel documents ride on the input stream beside the tasks. The task
// loop reads them in their turn, through the consumer group, but the
// task they name is often running then, or read before them: so the
// wrapper also follows its input outside the group (followInput), and
// looks ahead of each task it reads (lookAhead). Whichever sees a cancel
// first notes it; a noted cancel interrupts the task in flight, or
// answers a task read later at once, without running it.

// cancelNoteTTL bounds how long a cancel of a task not seen yet is kept
// in memory: its task is expected within moments, not hours.
const cancelNoteTTL = time.Hour

// maxCancelNotes bounds the notes kept; the oldest go first.
const maxCancelNotes = 10000

// lookAheadCount bounds the entries read after a task for its cancel.
const lookAheadCount = 1000

// cancelNote is a cancel seen for a request.
type cancelNote struct {
	reason string
	at     time.Time
}

// interruptible is what a cancel needs of the task in flight; its fields
// are guarded by Worker.mu.
type interruptible struct {
	interrupt chan struct{} // closed by a cancel or an abort; the agent's Spec.Interrupt
	cancelled bool
	reason    string
	// abort is why the wrapper itself interrupted the task (AUTH_FAILED):
	// the task fails with it.
	abort *protocol.Error
}

func newInterruptible() interruptible { return interruptible{interrupt: make(chan struct{})} }

// cancelLocked marks the task cancelled and interrupts its agent, once.
// The caller holds Worker.mu.
func (c *interruptible) cancelLocked(reason string) {
	if c.cancelled || c.abort != nil {
		return
	}
	c.cancelled, c.reason = true, reason
	close(c.interrupt)
}

// abortLocked interrupts the agent for a failure the wrapper saw, once,
// unless a cancel came first. The caller holds Worker.mu.
func (c *interruptible) abortLocked(e *protocol.Error) bool {
	if c.cancelled || c.abort != nil {
		return false
	}
	c.abort = e
	close(c.interrupt)
	return true
}

// noteCancel records a cancel and, when it names the task in flight,
// interrupts it. It returns whether it did.
func (w *Worker) noteCancel(c protocol.Cancel) bool {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancels == nil {
		w.cancels = map[string]cancelNote{}
	}
	if _, seen := w.cancels[c.RequestID]; !seen && len(w.cancels) >= maxCancelNotes {
		w.pruneCancelsLocked(now, true)
	}
	w.cancels[c.RequestID] = cancelNote{reason: c.Reason, at: now}
	if w.cur == nil || w.cur.task.RequestID != c.RequestID || w.cur.cancel.cancelled {
		return false
	}
	w.cur.cancel.cancelLocked(c.Reason)
	w.log.Info("cancel: interrupting the task in flight", "request_id", c.RequestID)
	return true
}

// pruneCancelsLocked forgets expired notes; with full, the oldest half
// too. The caller holds Worker.mu.
func (w *Worker) pruneCancelsLocked(now time.Time, full bool) {
	for id, n := range w.cancels {
		if now.Sub(n.at) > cancelNoteTTL {
			delete(w.cancels, id)
		}
	}
	if !full || len(w.cancels) < maxCancelNotes {
		return
	}
	cut := now
	for _, n := range w.cancels {
		if n.at.Before(cut) {
			cut = n.at
		}
	}
	mid := cut.Add(now.Sub(cut) / 2)
	for id, n := range w.cancels {
		if !n.at.After(mid) {
			delete(w.cancels, id)
		}
	}
}

// takeCancelLocked marks cur cancelled when a cancel of its request was
// noted before it started. The caller holds Worker.mu.
func (w *Worker) takeCancelLocked(cur *current) {
	if n, ok := w.cancels[cur.task.RequestID]; ok {
		cur.cancel.cancelLocked(n.reason)
	}
}

// controlDoc notes the cancel or steering message an input entry
// carries, if it is one.
func (w *Worker) controlDoc(entryID string, values map[string]any) {
	data, err := protocol.EntryData(values)
	if err != nil {
		return
	}
	switch _, typ, _ := protocol.PeekType(data); typ {
	case protocol.TypeCancel:
		if c, err := protocol.DecodeCancel(data); err == nil {
			w.noteCancel(c)
		}
	case protocol.TypeMessage:
		if m, err := protocol.DecodeMessage(data); err == nil {
			w.noteMessage(entryID, m)
		}
	case protocol.TypePermissionReply:
		if r, err := protocol.DecodePermissionReply(data); err == nil {
			w.resolvePermission(r.RequestID, r.PermissionID, r.Allow, r.Message)
		}
	}
}

// lookAhead notes the cancels that follow a task's entry on its input: a
// task queued behind others (or while the worker was paused) and
// cancelled meanwhile is answered without running.
func (w *Worker) lookAhead(ctx context.Context, log *slog.Logger, stream, entryID string) {
	entries, err := w.rdb.After(ctx, stream, entryID, lookAheadCount)
	if err != nil {
		log.Warn("cancel look-ahead failed; a cancel will still interrupt the task", "err", err)
		return
	}
	for _, e := range entries {
		w.controlDoc(e.ID, e.Values)
	}
}

// followInput follows the input stream outside the consumer group, from
// its newest entry at start, until ctx ends, noting every cancel as it
// arrives: while a task runs, the task loop does not read.
func (w *Worker) followInput(ctx context.Context) {
	stream := w.cfg.Keys.InputFor(w.cfg.Kind, w.cfg.WorkerID)
	f := w.rdb.NewFollower()
	defer f.Close()
	defer context.AfterFunc(ctx, func() { f.Close() })()
	backoff := newBackoff()
	last := ""
	for ctx.Err() == nil {
		if last == "" {
			id, err := f.LastID(ctx, stream)
			if err != nil {
				w.log.Debug("follow input: not reachable, retrying", "err", err)
				backoff.wait(ctx)
				continue
			}
			last = id
		}
		entries, err := f.Next(ctx, stream, last, 100, 5*time.Second)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Debug("follow input failed, retrying", "err", err)
				backoff.wait(ctx)
			}
			continue
		}
		backoff.reset()
		for _, e := range entries {
			last = e.ID
			w.controlDoc(e.ID, e.Values)
		}
	}
}

// handleCancelEntry takes a cancel document read through the group in its
// turn: noted (its task may come later), acknowledged, and the worker,
// idle, asks to be paused again (the entry kept it awake).
func (w *Worker) handleCancelEntry(src taskSource, e *rdb.Entry, data []byte) {
	c, err := protocol.DecodeCancel(data)
	if err != nil {
		w.reject(src, data, err)
		return
	}
	w.noteCancel(c)
	_, _ = store(w.pub, "ack "+e.ID, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, w.rdb.Ack(ctx, src.stream, src.group, e.ID)
	})
	w.requestPause(c.RequestID, "", "cancel_read")
}

// cancelledOutput makes o the output of a cancelled task: status
// cancelled with CANCELLED, whatever the agent said after the interrupt.
func (w *Worker) cancelledOutput(o protocol.Output, reason string, ran bool) protocol.Output {
	msg := "cancelled before it ran"
	if ran {
		msg = "cancelled while running"
	}
	if reason != "" {
		msg += ": " + w.redact.Redact(reason)
	}
	o.Status, o.Result, o.Question = protocol.StatusCancelled, nil, ""
	o.Error = protocol.NewError(protocol.CodeCancelled, "%s", msg)
	return o
}
