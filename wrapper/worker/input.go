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

// input is the first stage of the pipeline: it reads the worker's input
// through its consumer group (queue.go) and hands each entry to serve
// (route.go), one at a time; and it sees the control documents (cancel,
// message, permission reply) that ride on the input outside the group,
// while a task runs (follow) or queued behind it (lookAhead).
type input struct {
	inputParams
}

// inputParams are what the input is built from: its
// collaborators and settings, none of them the Worker.
type inputParams struct {
	rdb      inputRedis
	keys     protocol.Keys
	kind     protocol.Kind
	workerID string
	log      *slog.Logger
	degraded func() bool // the worker is degraded: a developer worker takes no new task
	controls *controls
	// serve handles one entry read through the group (router.serve).
	serve func(ctx context.Context, src taskSource, e *rdb.Entry)
}

func newInput(p inputParams) *input { return &input{inputParams: p} }

// inputRedis is what the input reads.
type inputRedis interface {
	rdb.Input
	rdb.Follow
}

// loop reads and serves entries until ctx ends, through an inputReader
// (queue.go). It reads this consumer's own pending entries (delivered,
// never acknowledged) before new ones: at start, and again after any
// read error, since a read whose reply was lost (a connection reset
// after Redis delivered) leaves its entry pending here and nowhere else.
func (w *input) loop(ctx context.Context) {
	in := w.newReader()
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
		src := taskSource{stream: e.Stream, group: in.group, entryID: e.ID, output: w.keys.OutputFor(w.kind, w.workerID), own: own}
		w.serve(ctx, src, &e.Entry)
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
func (w *input) lookAhead(ctx context.Context, log *slog.Logger, stream, entryID string) {
	if w.kind == protocol.KindDeveloper {
		stream = w.keys.DeveloperInput()
	}
	entries, err := w.rdb.After(ctx, stream, entryID, lookAheadCount)
	if err != nil {
		log.Warn("cancel look-ahead failed; a cancel will still interrupt the task", "err", err)
		return
	}
	for _, e := range entries {
		w.controls.entry(e)
	}
}

// followInput follows the input stream outside the consumer group, from
// its newest entry at start, until ctx ends, noting every cancel as it
// arrives: while a task runs, the task loop does not read.
func (w *input) follow(ctx context.Context) {
	stream := w.keys.InputFor(w.kind, w.workerID)
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
			w.controls.entry(e)
		}
	}
}

// timedOut reports whether a read failed because its deadline passed.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
