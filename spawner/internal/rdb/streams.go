package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// The managers share the command and control streams through one
// consumer group. An entry a manager reads stays pending under its name
// until it acknowledges it; while it works on the entry it claims it
// again every so often (Touch), which keeps its idle time low. An entry
// idle longer than the claim time belongs to a manager that died: any
// manager takes it (Claim), whatever its name.

// ReadNew reads up to count entries never delivered, blocking up to block.
func (r *RDB) ReadNew(ctx context.Context, stream, group, consumer string, count int64, block time.Duration) ([]redis.XMessage, error) {
	res, err := r.C.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"},
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
func (r *RDB) ReadOwn(ctx context.Context, stream, group, consumer, after string, count int64) ([]redis.XMessage, error) {
	res, err := r.C.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, after},
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
func (r *RDB) Claim(ctx context.Context, stream, group, consumer string, minIdle time.Duration, count int64) ([]redis.XMessage, error) {
	var out []redis.XMessage
	start := "0-0"
	for {
		msgs, next, err := r.C.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: stream, Group: group, Consumer: consumer,
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
func (r *RDB) Touch(ctx context.Context, stream, group, consumer string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return r.C.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: group, Consumer: consumer, MinIdle: 0, Messages: ids}).Err()
}

// Ack acknowledges an entry.
func (r *RDB) Ack(ctx context.Context, stream, group, id string) error {
	return r.C.XAck(ctx, stream, group, id).Err()
}
