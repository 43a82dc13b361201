package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// retry is the wait between retries of a Redis call the wrapper must
// make (an output, a read of its input): from 100 ms, doubled up to 5 s,
// with jitter, never giving up on its own (the caller's context does).
// The one backoff of the wrapper, from a well-kept library.
type retry struct{ b *backoff.ExponentialBackOff }

func newBackoff() *retry {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier, b.RandomizationFactor = 100*time.Millisecond, 5*time.Second, 2, 0.25
	return &retry{b: b}
}

func (r *retry) reset() { r.b.Reset() }

// next is the wait before the next retry.
func (r *retry) next() time.Duration { return r.b.NextBackOff() }

func (r *retry) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(r.next()):
	}
}

// Outbox keeps the events the wrapper publishes (lifecycle, progress,
// status and run updates) in a bounded FIFO and writes them to Redis in
// order, retrying with backoff while Redis is unreachable. When the buffer
// is full the oldest event is dropped and counted, and so is an event
// Redis refuses for good (Permanent). A task's output never goes through
// the outbox: the task runner stores it through store, after Flush.
type Outbox struct {
	max int
	log *slog.Logger

	mu    sync.Mutex // guards q and empty
	q     []outOp
	empty chan struct{} // closed while q is empty and nothing is in flight
	wake  chan struct{}
	seq   uint64 // guarded by mu

	dropped atomic.Int64

	// Permanent, when set, tells an error that no retry can mend.
	Permanent func(error) bool
}

type outOp struct {
	seq  uint64
	name string
	do   func(ctx context.Context) error
}

// NewOutbox returns an outbox that holds at most max events.
func NewOutbox(max int, log *slog.Logger) *Outbox {
	e := make(chan struct{})
	close(e)
	return &Outbox{max: max, log: log, empty: e, wake: make(chan struct{}, 1)}
}

// Push queues an event; name says what it is, for logs.
func (o *Outbox) Push(name string, do func(ctx context.Context) error) {
	o.mu.Lock()
	if len(o.q) == 0 {
		o.empty = make(chan struct{})
	}
	o.seq++
	o.q = append(o.q, outOp{seq: o.seq, name: name, do: do})
	if len(o.q) > o.max {
		o.log.Warn("event buffer full, dropping the oldest event", "event", o.q[0].name, "buffer", o.max)
		o.q = o.q[1:]
		o.dropped.Add(1)
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Dropped returns how many events were dropped because the buffer was full.
func (o *Outbox) Dropped() int64 { return o.dropped.Load() }

// Len returns how many events wait.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.q)
}

// Flush waits until every queued event is written, or ctx ends.
func (o *Outbox) Flush(ctx context.Context) error {
	o.mu.Lock()
	e := o.empty
	o.mu.Unlock()
	select {
	case <-e:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run writes events until ctx ends. It owns the head of the queue: an
// event leaves the queue only once written.
func (o *Outbox) Run(ctx context.Context) {
	retry := newBackoff()
	retry.b.InitialInterval = 50 * time.Millisecond
	retry.reset()
	for {
		o.mu.Lock()
		var head outOp
		n := len(o.q)
		if n > 0 {
			head = o.q[0]
		}
		o.mu.Unlock()
		if n == 0 {
			select {
			case <-ctx.Done():
				return
			case <-o.wake:
				continue
			}
		}
		err := head.do(ctx)
		if err != nil && o.Permanent != nil && o.Permanent(err) {
			// Redis answered, and refused: retrying cannot help, and the
			// event would block every one behind it.
			o.log.Error("event refused by Redis, dropped", "event", head.name, "err", err)
			o.dropped.Add(1)
			err = nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := retry.next()
			o.log.Debug("event not written, will retry", "event", head.name, "err", err, "backoff", d)
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		retry.reset()
		o.mu.Lock()
		// Push may have dropped the head meanwhile: remove it only if it
		// is still there.
		if len(o.q) > 0 && o.q[0].seq == head.seq {
			o.q = o.q[1:]
		}
		if len(o.q) == 0 {
			select {
			case <-o.empty:
			default:
				close(o.empty)
			}
		}
		o.mu.Unlock()
	}
}
