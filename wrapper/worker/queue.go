package worker

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// developerPoll bounds a developer worker's wait for a new entry: each
// turn it reads its own pending entries first, where a task handed to it
// (affinity.go) appears, so a hand-off waits at most this long.
const developerPoll = time.Second

// pendingBatch bounds the own pending entries read at once.
const pendingBatch = 10

// inputReader reads the worker's input through its group. A long-lived
// worker reads its own input in order. A developer worker reads the
// developer queues (one per priority): first its own pending entries
// (delivered to it and not acknowledged: a task read before a restart,
// or handed to it), then, unless it is degraded, one new entry of the
// queue whose turn it is (protocol.PriorityOrder), or of the others
// highest first, and when all are empty it waits on all of them. A
// degraded developer worker takes no new task from the queues until its
// health check passes; what is already its own is served as ever.
type inputReader struct {
	input   *input
	streams []string // highest priority first, for a developer worker
	group   string
	// pending: read this consumer's own pending entries before new ones
	// (at start, and after a read error).
	pending bool
	backlog []rdb.StreamEntry // entries delivered and not yet served
	order   protocol.PriorityOrder
}

func (w *input) newReader() *inputReader {
	return &inputReader{input: w, streams: w.keys.InputsFor(w.kind, w.workerID), group: protocol.GroupFor(w.kind), pending: true}
}

func (in *inputReader) developer() bool { return in.input.kind == protocol.KindDeveloper }

// ensureGroups creates the group on every stream it reads.
func (in *inputReader) ensureGroups(ctx context.Context) error {
	for _, s := range in.streams {
		if err := in.input.rdb.EnsureGroup(ctx, s, in.group); err != nil {
			return err
		}
	}
	return nil
}

// next returns the next entry to serve; nil when none came within the
// read's wait. own reports an entry that was this consumer's already
// (pending), which is never handed on.
func (in *inputReader) next(ctx context.Context) (e *rdb.StreamEntry, own bool, err error) {
	if e := in.pop(); e != nil {
		return e, true, nil
	}
	if in.pending || in.developer() {
		got, err := in.input.rdb.ReadGroup(ctx, in.streams, in.group, in.input.workerID, true, pendingBatch, -1)
		if err != nil {
			return nil, false, err
		}
		in.pending = false
		if in.backlog = got; len(got) > 0 {
			return in.pop(), true, nil
		}
	}
	if !in.developer() {
		got, err := in.input.rdb.ReadGroup(ctx, in.streams, in.group, in.input.workerID, false, 1, 5*time.Second)
		in.backlog = got
		return in.pop(), false, err
	}
	if in.input.degraded() {
		sleepCtx(ctx, developerPoll)
		return nil, false, nil
	}
	for _, p := range in.order.Next() {
		got, err := in.input.rdb.ReadGroup(ctx, []string{in.input.keys.DeveloperInputFor(p)}, in.group, in.input.workerID, false, 1, -1)
		if err != nil || len(got) > 0 {
			in.backlog = got
			return in.pop(), false, err
		}
	}
	// Every queue was empty: wait on all. Entries that came to several at
	// once are all this consumer's now, served in priority order.
	got, err := in.input.rdb.ReadGroup(ctx, in.streams, in.group, in.input.workerID, false, 1, developerPoll)
	in.backlog = got
	if len(got) > 1 {
		return in.pop(), true, err
	}
	return in.pop(), false, err
}

func (in *inputReader) pop() *rdb.StreamEntry {
	if len(in.backlog) == 0 {
		return nil
	}
	e := in.backlog[0]
	in.backlog = in.backlog[1:]
	return &e
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
