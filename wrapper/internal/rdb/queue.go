package rdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

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
func (r *RDB) ReadGroup(ctx context.Context, streams []string, group, consumer string, pending bool, count int64, block time.Duration) ([]StreamEntry, error) {
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
		if strings.HasPrefix(err.Error(), "NOGROUP") {
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

// handOffScript gives an entry this consumer read to another consumer of
// its group, if that one is still in the idle set with a score (its last
// heartbeat while idle, unix ms) at least the minimum. The entry keeps
// its delivery count: the other consumer's read of its pending entries
// adds the one it would have had.
//
// KEYS[1] stream, KEYS[2] idle set; ARGV[1] group, ARGV[2] the other
// consumer, ARGV[3] entry id, ARGV[4] minimum score. Returns 1 when
// handed.
var handOffScript = redis.NewScript(`
local score = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[2]) or '0')
if score < tonumber(ARGV[4]) then return 0 end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
local count = math.max(tonumber(p[1][4]) - 1, 0)
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', count)
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`)

// HandOff gives the entry id of stream (read by this consumer through
// group) to consumer to, if to is in the idle set idle with a score of at
// least since; it reports whether it did.
func (r *RDB) HandOff(ctx context.Context, stream, idle, group, to, id string, since time.Time) (bool, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	n, err := handOffScript.Run(ctx, r.c, []string{stream, idle}, group, to, id, since.UnixMilli()).Int()
	if err != nil {
		return false, fmt.Errorf("rdb: hand %s of %s to %s: %w", id, stream, to, err)
	}
	return n == 1, nil
}

// HGetAll returns every field of a hash (empty when there is none).
func (r *RDB) HGetAll(ctx context.Context, key string) (map[string]string, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.HGetAll(ctx, key).Result()
}

// Get returns a string key's value (nil when there is none).
func (r *RDB) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	b, err := r.c.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}

// PushCapped prepends doc to a list and keeps its max newest entries.
func (r *RDB) PushCapped(ctx context.Context, key string, doc []byte, max int64) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, doc)
		p.LTrim(ctx, key, 0, max-1)
		return nil
	})
	return err
}

// SetIdle puts member in the sorted set key with score at (unix ms), or
// takes it out when idle is false.
func (r *RDB) SetIdle(ctx context.Context, key, member string, idle bool, at time.Time) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	if idle {
		return r.c.ZAdd(ctx, key, redis.Z{Score: float64(at.UnixMilli()), Member: member}).Err()
	}
	return r.c.ZRem(ctx, key, member).Err()
}
