package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Streams is the spawner's use of streams: what it adds (the lifecycle
// stream, replies), the consumer group it shares with the other managers
// on the command and control streams, and a reader's look at the newest
// entries.
type Streams interface {
	AddEntry(ctx context.Context, stream string, doc []byte) error
	Lifecycle(ctx context.Context, l protocol.Lifecycle) error
	Reply(ctx context.Context, replyTo string, doc []byte, stream, group, id string) error
	EnsureGroup(ctx context.Context, stream, group string) error
	Delivered(ctx context.Context, stream, group, id string) error
	ReadNew(ctx context.Context, stream, group, consumer string, count int64, block time.Duration) ([]redis.XMessage, error)
	ReadOwn(ctx context.Context, stream, group, consumer, after string, count int64) ([]redis.XMessage, error)
	Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int64) ([]redis.XMessage, error)
	Touch(ctx context.Context, stream, group, consumer string, ids []string) error
	Ack(ctx context.Context, stream, group, id string) error
	Newest(ctx context.Context, streams []string, n int64) (map[string][]redis.XMessage, error)
}

// streamCmds implements Streams over the shared connection.
type streamCmds struct{ *core }

var _ Streams = (*streamCmds)(nil)

// The managers share the command and control streams through one
// consumer group. An entry a manager reads stays pending under its name
// until it acknowledges it; while it works on the entry it claims it
// again every so often (Touch), which keeps its idle time low. An entry
// idle longer than the claim time belongs to a manager that died: any
// manager takes it (Claim), whatever its name.

// ReadNew reads up to count entries never delivered, blocking up to block.
func (r *streamCmds) ReadNew(ctx context.Context, stream, group, consumer string, count int64, block time.Duration) ([]redis.XMessage, error) {
	res, err := r.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"},
		Count: count, Block: block}).Result()
	if Nil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res[0].Messages, nil
}

// ReadOwn reads up to count of consumer's own pending entries after the
// id after ("0" for the first).
func (r *streamCmds) ReadOwn(ctx context.Context, stream, group, consumer, after string, count int64) ([]redis.XMessage, error) {
	res, err := r.c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, after},
		Count: count}).Result()
	if Nil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res[0].Messages, nil
}

// Claim takes for consumer up to count entries of stream idle longer
// than minIdle (their reader died), oldest first.
func (r *streamCmds) Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int64) ([]redis.XMessage, error) {
	var out []redis.XMessage
	start := "0-0"
	for {
		msgs, next, err := r.c.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: stream, Group: group, Consumer: consumer,
			MinIdle: minIdle, Start: start, Count: count}).Result()
		if err != nil {
			return out, err
		}
		out = append(out, msgs...)
		if next == "0-0" || int64(len(out)) >= count {
			return out, nil
		}
		start = next
	}
}

// Touch resets the idle time of entries consumer works on, so that no
// other manager claims them.
func (r *streamCmds) Touch(ctx context.Context, stream, group, consumer string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return r.c.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: group, Consumer: consumer, MinIdle: 0, Messages: ids}).Err()
}

// Ack acknowledges an entry.
func (r *streamCmds) Ack(ctx context.Context, stream, group, id string) error {
	return r.c.XAck(ctx, stream, group, id).Err()
}

// xadd adds an entry with the approximate MAXLEN.
func (r *streamCmds) xadd(ctx context.Context, stream string, doc []byte) error {
	return r.c.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: r.StreamMaxLen, Approx: true, Values: protocol.Values(doc)}).Err()
}

// AddEntry appends a document to a stream (MAXLEN ~ StreamMaxLen).
func (r *streamCmds) AddEntry(ctx context.Context, stream string, doc []byte) error {
	return r.xadd(ctx, stream, doc)
}

// Lifecycle publishes a lifecycle event.
func (r *streamCmds) Lifecycle(ctx context.Context, l protocol.Lifecycle) error {
	doc, err := l.Encode()
	if err != nil {
		return err
	}
	return r.xadd(ctx, r.Keys.Lifecycle(), doc)
}

// Reply writes a command's reply on the stream the command named, renews
// that stream's expiry and acknowledges the command's entry (stream,
// group, id), in one transaction: a command is answered and acknowledged
// together or not at all (then executed again, idempotently, and
// answered).
func (r *streamCmds) Reply(ctx context.Context, replyTo string, doc []byte, stream, group, id string) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: replyTo, MaxLen: r.StreamMaxLen, Approx: true, Values: protocol.Values(doc)})
		p.Expire(ctx, replyTo, r.ReplyTTL)
		p.XAck(ctx, stream, group, id)
		return nil
	})
	return err
}

// EnsureGroup creates a consumer group (and its stream) when missing.
func (r *streamCmds) EnsureGroup(ctx context.Context, stream, group string) error {
	err := r.c.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return err
	}
	return nil
}

// Delivered marks the entries of stream up to id as delivered to group
// (XGROUP SETID), so that Waiting returns only what comes after.
func (r *streamCmds) Delivered(ctx context.Context, stream, group, id string) error {
	err := r.c.XGroupSetID(ctx, stream, group, id).Err()
	if noGroup(err) {
		err = r.c.XGroupCreateMkStream(ctx, stream, group, id).Err()
	}
	return err
}

// Newest returns the n newest entries of each of streams (newest first;
// none for a stream that does not exist), in one round trip.
func (r *streamCmds) Newest(ctx context.Context, streams []string, n int64) (map[string][]redis.XMessage, error) {
	out := make(map[string][]redis.XMessage, len(streams))
	if len(streams) == 0 {
		return out, nil
	}
	pipe := r.c.Pipeline()
	reads := make(map[string]*redis.XMessageSliceCmd, len(streams))
	for _, stream := range streams {
		reads[stream] = pipe.XRevRangeN(ctx, stream, "+", "-", n)
	}
	if _, err := pipe.Exec(ctx); err != nil && !Nil(err) {
		return nil, err
	}
	for stream, cmd := range reads {
		out[stream] = cmd.Val()
	}
	return out, nil
}
