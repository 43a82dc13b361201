package worker

import (
	"context"
	"errors"
	"net"
	"os"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// loop reads and runs tasks until ctx ends. It reads this consumer's own
// pending entries (delivered, never acknowledged) before new ones: at
// start, and again after any read error, since a read whose reply was lost
// (a connection reset after Redis delivered) leaves its entry pending here
// and nowhere else.
func (w *Worker) loop(ctx context.Context) {
	stream := w.cfg.Keys.InputFor(w.cfg.Kind, w.cfg.WorkerID)
	group := protocol.GroupFor(w.cfg.Kind)
	defer context.AfterFunc(ctx, w.rdb.StopReading)()
	backoff := newBackoff()
	groupReady, pending := false, true
	again := false // a timed-out read was just retried without waiting
	for ctx.Err() == nil {
		if !groupReady {
			if err := w.rdb.EnsureGroup(ctx, stream, group); err != nil {
				w.log.Warn("input not reachable, retrying", "stream", stream, "err", err)
				backoff.wait(ctx)
				continue
			}
			groupReady = true
		}
		e, err := w.rdb.ReadTask(ctx, stream, group, w.cfg.WorkerID, pending, 5*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, rdb.ErrNoGroup) {
				groupReady = false
			}
			pending = true
			if timedOut(err) && !again {
				// The read used up its own deadline: the container was
				// paused through it (the clock ran on), or Redis did not
				// answer for that long. Read again at once, this worker's
				// pending entries first (the task that woke it may be
				// one); a second failure in a row waits its backoff.
				w.log.Info("read input timed out (paused meanwhile?), reading again", "stream", stream, "err", err)
				again = true
				continue
			}
			w.log.Warn("read input failed, retrying with this worker's pending entries first", "stream", stream, "err", err)
			backoff.wait(ctx)
			continue
		}
		backoff.reset()
		again = false
		if e == nil {
			pending = false // the backlog of this consumer is done
			continue
		}
		if ctx.Err() != nil {
			// Read as shutdown began: left pending for this worker's next
			// start, or for the spawner to hand on.
			return
		}
		w.serve(ctx, stream, group, e)
	}
}

// timedOut reports whether a read failed because its deadline passed.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
