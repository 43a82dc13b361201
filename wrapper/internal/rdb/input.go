package rdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Input is what the worker's input reader calls: the consumer group of its
// input streams (its own, or the developer queues), read in turn, and a
// blocking read that shutdown ends at once.
type Input interface {
	EnsureGroup(ctx context.Context, stream, group string) error
	ReadGroup(ctx context.Context, streams []string, group, consumer string, pending bool, count int64, block time.Duration) ([]StreamEntry, error)
	StopReading()
}

// inputCmds implements Input over the shared connection.
type inputCmds struct{ *core }

var _ Input = (*inputCmds)(nil)

// StreamEntry is an entry read for this consumer and the stream it came
// from.
type StreamEntry struct {
	Stream string
	Entry
}

// ReadGroup reads through group as consumer from every stream at once:
// with pending, the consumer's own entries that were delivered but not
// acknowledged (at most count of each stream); otherwise new entries,
// waiting up to block (-1: not at all) for one. It returns what came, in
// the order of streams (nil when nothing did). Reading several streams
// may deliver an entry of each.
func (r *inputCmds) ReadGroup(ctx context.Context, streams []string, group, consumer string, pending bool, count int64, block time.Duration) ([]StreamEntry, error) {
	id := ">"
	if pending {
		id, block = "0", -1
	}
	args := &redis.XReadGroupArgs{Group: group, Consumer: consumer, Count: count, Block: block}
	args.Streams = append(args.Streams, streams...)
	for range streams {
		args.Streams = append(args.Streams, id)
	}
	tctx, cancel := context.WithTimeout(ctx, r.Timeout+max(block, 0))
	defer cancel()
	res, err := r.reader.XReadGroup(tctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if redis.HasErrorPrefix(err, "NOGROUP") {
			return nil, ErrNoGroup
		}
		return nil, fmt.Errorf("rdb: read %s: %w", strings.Join(streams, ", "), err)
	}
	var out []StreamEntry
	for _, s := range res {
		for _, m := range s.Messages {
			out = append(out, StreamEntry{Stream: s.Stream, Entry: Entry{ID: m.ID, Values: m.Values}})
		}
	}
	return out, nil
}

// StopReading ends a blocking ReadTask at once and makes every later one
// fail: go-redis does not watch a context's cancellation while it waits for
// a reply, so shutdown closes the reading connection instead.
func (r *inputCmds) StopReading() { r.reader.Close() }

// EnsureGroup creates the consumer group on stream (and the stream) when
// missing. A new group reads from the start of the stream, so that tasks
// added before the first worker started are served.
func (r *inputCmds) EnsureGroup(ctx context.Context, stream, group string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	err := r.c.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("rdb: create group %s on %s: %w", group, stream, err)
	}
	return nil
}
