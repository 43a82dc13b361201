package rdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/redisconn"
)

// Follow is what sees the input's control documents (cancel, message,
// permission reply) outside the consumer group: the follower, and the
// look-ahead after a task's entry.
type Follow interface {
	NewFollower() *Follower
	After(ctx context.Context, stream, after string, count int64) ([]Entry, error)
}

// followCmds implements Follow over the shared connection.
type followCmds struct{ *core }

var _ Follow = (*followCmds)(nil)

// Follower reads a stream outside any consumer group, on a connection of
// its own (a blocking read holds it), so that the wrapper sees the control
// documents (cancel) on its input while its task loop is busy, without
// taking any entry from the group.
type Follower struct {
	c       *redis.Client
	timeout time.Duration
}

// NewFollower returns a Follower on the same server as r.
func (r *followCmds) NewFollower() *Follower {
	opt := r.followOpt // one connection, as the reader's
	return &Follower{c: redisconn.NewClient(&opt), timeout: r.Timeout}
}

// Close ends a blocking Next at once and every later one.
func (f *Follower) Close() error { return f.c.Close() }

// LastID returns the id of stream's newest entry, "0-0" when it is empty
// or missing.
func (f *Follower) LastID(ctx context.Context, stream string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	msgs, err := f.c.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("rdb: last entry of %s: %w", stream, err)
	}
	if len(msgs) == 0 {
		return "0-0", nil
	}
	return msgs[0].ID, nil
}

// Next waits up to block for the entries of stream after the id after
// (at most count); none is no error.
func (f *Follower) Next(ctx context.Context, stream, after string, count int64, block time.Duration) ([]Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout+block)
	defer cancel()
	res, err := f.c.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, after}, Count: count, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rdb: follow %s: %w", stream, err)
	}
	var out []Entry
	for _, s := range res {
		for _, m := range s.Messages {
			out = append(out, Entry{ID: m.ID, Values: m.Values})
		}
	}
	return out, nil
}

// After returns up to count entries of stream after the id after, at once.
func (r *followCmds) After(ctx context.Context, stream, after string, count int64) ([]Entry, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	msgs, err := r.c.XRangeN(ctx, stream, "("+after, "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("rdb: entries of %s after %s: %w", stream, after, err)
	}
	out := make([]Entry, len(msgs))
	for i, m := range msgs {
		out[i] = Entry{ID: m.ID, Values: m.Values}
	}
	return out, nil
}
