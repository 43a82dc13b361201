package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// LastUse is when each worker image and project volume was last used:
// what the image store and the volumes record, and what their collectors
// read to remove what nobody used for long.
type LastUse interface {
	TouchImage(ctx context.Context, tag string, now time.Time) error
	ImageLastUsed(ctx context.Context, tag string) (time.Time, error)
	ForgetImage(ctx context.Context, tag string) error
	TouchVolume(ctx context.Context, name string, now time.Time) error
	VolumeLastUsed(ctx context.Context, name string) (time.Time, error)
	ForgetVolume(ctx context.Context, name string) error
}

// lastUseCmds implements LastUse over the shared connection.
type lastUseCmds struct{ *core }

var _ LastUse = (*lastUseCmds)(nil)

// TouchImage records the use of a worker image now.
func (r *lastUseCmds) TouchImage(ctx context.Context, tag string, now time.Time) error {
	return r.touch(ctx, ctlplane.ImagesLastUsedKey(r.Keys), tag, now)
}

// ImageLastUsed returns when a worker image was last used (zero when never
// recorded).
func (r *lastUseCmds) ImageLastUsed(ctx context.Context, tag string) (time.Time, error) {
	return r.lastUsed(ctx, ctlplane.ImagesLastUsedKey(r.Keys), tag)
}

// ForgetImage drops a removed image's record.
func (r *lastUseCmds) ForgetImage(ctx context.Context, tag string) error {
	return r.c.ZRem(ctx, ctlplane.ImagesLastUsedKey(r.Keys), tag).Err()
}

// TouchVolume records the use of a project volume now.
func (r *lastUseCmds) TouchVolume(ctx context.Context, name string, now time.Time) error {
	return r.touch(ctx, ctlplane.VolumesLastUsedKey(r.Keys), name, now)
}

// VolumeLastUsed returns when a project volume was last used (zero when
// never recorded).
func (r *lastUseCmds) VolumeLastUsed(ctx context.Context, name string) (time.Time, error) {
	return r.lastUsed(ctx, ctlplane.VolumesLastUsedKey(r.Keys), name)
}

// ForgetVolume drops a removed volume's record.
func (r *lastUseCmds) ForgetVolume(ctx context.Context, name string) error {
	return r.c.ZRem(ctx, ctlplane.VolumesLastUsedKey(r.Keys), name).Err()
}

// touch scores member of a last-use sorted set with now (Unix seconds).
func (r *lastUseCmds) touch(ctx context.Context, key, member string, now time.Time) error {
	return r.c.ZAdd(ctx, key, redis.Z{Score: float64(now.Unix()), Member: member}).Err()
}

// lastUsed reads member's score in a last-use sorted set (zero when none).
func (r *lastUseCmds) lastUsed(ctx context.Context, key, member string) (time.Time, error) {
	score, err := r.c.ZScore(ctx, key, member).Result()
	if Nil(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(int64(score), 0), nil
}
