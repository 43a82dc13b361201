package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// The calls of the spawner's client side (spawner.Client, spawner.Watcher)
// and of the image store and its collector.

// LastID returns the id of a stream's last entry ("0-0" when it has none),
// the point after which a reader sees only what comes next.
func (r *RDB) LastID(ctx context.Context, stream string) (string, error) {
	msgs, err := r.C.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return "", err
	}
	if len(msgs) == 1 {
		return msgs[0].ID, nil
	}
	return "0-0", nil
}

// Send adds a command or a task (any document) to a stream, confirmed by
// WAIT with r.Wait on: a failover neither loses it nor, as far as a look
// at the new primary can tell, adds it twice (redisconn.XAdd).
func (r *RDB) Send(ctx context.Context, stream string, doc []byte) error {
	_, err := redisconn.XAdd(ctx, r.C, r.Wait, &redis.XAddArgs{Stream: stream, MaxLen: r.StreamMaxLen, Approx: true, Values: protocol.Values(doc)})
	if redisconn.IsNotReplicated(err) {
		return nil // on the primary, which has no replica in sync: nothing more to wait for
	}
	return err
}

// Read reads, after the given ids, the entries of several streams
// (streams then ids, as XREAD takes them), blocking up to block; nil when
// none came.
func (r *RDB) Read(ctx context.Context, streamsThenIDs []string, block time.Duration, count int64) ([]redis.XStream, error) {
	res, err := r.C.XRead(ctx, &redis.XReadArgs{Streams: streamsThenIDs, Block: block, Count: count}).Result()
	if Nil(err) {
		return nil, nil
	}
	return res, err
}

// TouchImage records the use of a worker image now.
func (r *RDB) TouchImage(ctx context.Context, tag string, now time.Time) error {
	return r.touch(ctx, r.Keys.ImagesLastUsed(), tag, now)
}

// ImageLastUsed returns when a worker image was last used (zero when never
// recorded).
func (r *RDB) ImageLastUsed(ctx context.Context, tag string) (time.Time, error) {
	return r.lastUsed(ctx, r.Keys.ImagesLastUsed(), tag)
}

// ForgetImage drops a removed image's record.
func (r *RDB) ForgetImage(ctx context.Context, tag string) error {
	return r.C.ZRem(ctx, r.Keys.ImagesLastUsed(), tag).Err()
}

// TouchVolume records the use of a project volume now.
func (r *RDB) TouchVolume(ctx context.Context, name string, now time.Time) error {
	return r.touch(ctx, r.Keys.VolumesLastUsed(), name, now)
}

// VolumeLastUsed returns when a project volume was last used (zero when
// never recorded).
func (r *RDB) VolumeLastUsed(ctx context.Context, name string) (time.Time, error) {
	return r.lastUsed(ctx, r.Keys.VolumesLastUsed(), name)
}

// ForgetVolume drops a removed volume's record.
func (r *RDB) ForgetVolume(ctx context.Context, name string) error {
	return r.C.ZRem(ctx, r.Keys.VolumesLastUsed(), name).Err()
}

// touch scores member of a last-use sorted set with now (Unix seconds).
func (r *RDB) touch(ctx context.Context, key, member string, now time.Time) error {
	return r.C.ZAdd(ctx, key, redis.Z{Score: float64(now.Unix()), Member: member}).Err()
}

// lastUsed reads member's score in a last-use sorted set (zero when none).
func (r *RDB) lastUsed(ctx context.Context, key, member string) (time.Time, error) {
	score, err := r.C.ZScore(ctx, key, member).Result()
	if Nil(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(int64(score), 0), nil
}
