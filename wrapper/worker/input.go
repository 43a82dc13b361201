package worker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// loop reads and runs tasks until ctx ends, through an inputReader
// (queue.go). It reads this consumer's own pending entries (delivered,
// never acknowledged) before new ones: at start, and again after any
// read error, since a read whose reply was lost (a connection reset
// after Redis delivered) leaves its entry pending here and nowhere else.
func (w *Worker) loop(ctx context.Context) {
	in := w.newInputReader()
	defer context.AfterFunc(ctx, w.rdb.StopReading)()
	backoff := newBackoff()
	groupReady := false
	again := false // a timed-out read was just retried without waiting
	for ctx.Err() == nil {
		if !groupReady {
			if err := in.ensureGroups(ctx); err != nil {
				w.log.Warn("input not reachable, retrying", "streams", in.streams, "err", err)
				backoff.wait(ctx)
				continue
			}
			groupReady = true
		}
		e, own, err := in.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, rdb.ErrNoGroup) {
				groupReady = false
			}
			in.pending = true
			if timedOut(err) && !again {
				// The read used up its own deadline: the container was
				// paused through it (the clock ran on), or Redis did not
				// answer for that long. Read again at once, this worker's
				// pending entries first (the task that woke it may be
				// one); a second failure in a row waits its backoff.
				w.log.Info("read input timed out (paused meanwhile?), reading again", "streams", in.streams, "err", err)
				again = true
				continue
			}
			w.log.Warn("read input failed, retrying with this worker's pending entries first", "streams", in.streams, "err", err)
			backoff.wait(ctx)
			continue
		}
		backoff.reset()
		again = false
		if e == nil {
			continue
		}
		if ctx.Err() != nil {
			// Read as shutdown began: left pending for this worker's next
			// start, or for the spawner to hand on.
			return
		}
		src := taskSource{stream: e.Stream, group: in.group, entryID: e.ID, output: w.cfg.Keys.OutputFor(w.cfg.Kind, w.cfg.WorkerID), own: own}
		w.serve(ctx, src, &e.Entry)
	}
}

// route hands an entry read through the group to what its type is for:
// a task runs (task.go); a cancel, a steering message or a permission
// reply is noted (control) and acknowledged, and the worker, idle, asks to
// be paused again (the entry kept it awake). An entry that cannot be
// decoded is answered INVALID_TASK (reject).
func (w *Worker) route(ctx context.Context, src taskSource, e *rdb.Entry) {
	data, err := protocol.EntryData(e.Values)
	if err != nil {
		w.reject(src, data, err)
		return
	}
	_, typ, _ := protocol.PeekType(data)
	if typ == protocol.TypeAdopt {
		w.adopt(ctx, src, data)
		return
	}
	if typ == protocol.TypeCancel || typ == protocol.TypeMessage || typ == protocol.TypePermissionReply {
		requestID, err := w.control(e.ID, typ, data)
		if err != nil {
			w.reject(src, data, err)
			return
		}
		w.pub.ack(src)
		w.requestPause(requestID, "", pauseReasons[typ])
		return
	}
	task, err := protocol.DecodeTask(data)
	if err != nil {
		w.reject(src, data, err)
		return
	}
	if w.handOff(ctx, src, task) {
		return
	}
	w.runTask(ctx, src, e, task)
}

// pauseReasons are the reasons of the pause asked after a control entry.
var pauseReasons = map[protocol.Type]string{protocol.TypeCancel: "cancel_read", protocol.TypeMessage: "message_read",
	protocol.TypePermissionReply: "permission_reply_read"}

// control notes the cancel, steering message or permission reply data
// (of type typ), from the entry entryID: the cancel interrupts its task
// or waits for it (cancel.go), the message goes to its task or waits
// (steer.go), the reply answers its permission (approve.go). It returns
// the request the document names.
func (w *Worker) control(entryID string, typ protocol.Type, data []byte) (string, error) {
	switch typ {
	case protocol.TypeCancel:
		c, err := protocol.DecodeCancel(data)
		if err == nil {
			w.cancels.note(c)
		}
		return c.RequestID, err
	case protocol.TypeMessage:
		m, err := protocol.DecodeMessage(data)
		if err == nil {
			w.steering.note(entryID, m)
		}
		return m.RequestID, err
	default:
		r, err := protocol.DecodePermissionReply(data)
		if err == nil {
			w.approvals.resolve(r.RequestID, r.PermissionID, r.Allow, r.Message)
		}
		return r.RequestID, err
	}
}

// controlEntry notes the cancel, steering message or permission reply an
// input entry seen outside the group carries, if it is one.
func (w *Worker) controlEntry(e rdb.Entry) {
	data, err := protocol.EntryData(e.Values)
	if err != nil {
		return
	}
	if _, typ, _ := protocol.PeekType(data); typ == protocol.TypeCancel || typ == protocol.TypeMessage || typ == protocol.TypePermissionReply {
		_, _ = w.control(e.ID, typ, data)
	}
}

// lookAheadCount bounds the entries read after a task for its cancel.
const lookAheadCount = 1000

// lookAhead notes the cancels that follow a task's entry on its input: a
// task queued behind others (or while the worker was paused) and
// cancelled meanwhile is answered without running.
// A developer task's cancels go on the normal developer queue whatever
// its priority (entry ids grow across streams, so the cancels after the
// task's entry are there).
func (w *Worker) lookAhead(ctx context.Context, log *slog.Logger, stream, entryID string) {
	if w.cfg.Kind == protocol.KindDeveloper {
		stream = w.cfg.Keys.DeveloperInput()
	}
	entries, err := w.rdb.After(ctx, stream, entryID, lookAheadCount)
	if err != nil {
		log.Warn("cancel look-ahead failed; a cancel will still interrupt the task", "err", err)
		return
	}
	for _, e := range entries {
		w.controlEntry(e)
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
			w.controlEntry(e)
		}
	}
}

// timedOut reports whether a read failed because its deadline passed.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
