package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// tryAdmitScript admits a create at once or not at all: only when no
// create waits in the queue and a slot is free. A pool refill uses it, so
// that pools never take a slot an explicit create is waiting for. KEYS
// queue, queue leases, creating, workers, retiring; ARGV id, now ms, lease
// ms, max.
var tryAdmitScript = redis.NewScript(`
local now = tonumber(ARGV[2])
for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('LREM', KEYS[1], 0, d)
  redis.call('ZREM', KEYS[2], d)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('LLEN', KEYS[1]) > 0 then return 0 end
local used = redis.call('SCARD', KEYS[4]) + redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[5])
if used >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
return 1
`)

// TryAdmit admits the create id only if nothing waits and a slot is free.
func (r *RDB) TryAdmit(ctx context.Context, id string, now time.Time, lease time.Duration, max int) (bool, error) {
	k := r.Keys
	n, err := tryAdmitScript.Run(ctx, r.C, []string{k.CreationQueue(), k.CreationLeases(), k.Creating(), k.Workers(), k.Retiring()},
		id, ms(now), lease.Milliseconds(), max).Int()
	return n == 1, err
}

// QueueLength returns how many creates wait for a slot.
func (r *RDB) QueueLength(ctx context.Context) (int64, error) {
	return r.C.LLen(ctx, r.Keys.CreationQueue()).Result()
}

// AddWarm makes a warm worker ready for allocation.
func (r *RDB) AddWarm(ctx context.Context, pool, id string) error {
	return r.C.SAdd(ctx, r.Keys.PoolWarmSet(pool), id).Err()
}

// TakeWarm takes a warm worker of a pool for one create ("" when none).
func (r *RDB) TakeWarm(ctx context.Context, pool string) (string, error) {
	id, err := r.C.SPop(ctx, r.Keys.PoolWarmSet(pool)).Result()
	if Nil(err) {
		return "", nil
	}
	return id, err
}

// DropWarm takes a worker out of a pool's warm set (it is being retired);
// it reports whether it was there.
func (r *RDB) DropWarm(ctx context.Context, pool, id string) (bool, error) {
	n, err := r.C.SRem(ctx, r.Keys.PoolWarmSet(pool), id).Result()
	return n == 1, err
}

// Warm returns a pool's warm workers.
func (r *RDB) Warm(ctx context.Context, pool string) ([]string, error) {
	return r.C.SMembers(ctx, r.Keys.PoolWarmSet(pool)).Result()
}

// CountPool adds to a pool's counters.
func (r *RDB) CountPool(ctx context.Context, pool string, counts map[string]int64) error {
	pipe := r.C.Pipeline()
	for f, n := range counts {
		pipe.HIncrBy(ctx, r.Keys.PoolStats(pool), f, n)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// PoolStats returns a pool's counters.
func (r *RDB) PoolStats(ctx context.Context, pool string) (map[string]string, error) {
	return r.C.HGetAll(ctx, r.Keys.PoolStats(pool)).Result()
}

// CommandWorkerOf returns the worker id a create command made, "" when
// none yet.
func (r *RDB) CommandWorkerOf(ctx context.Context, commandID string) (string, error) {
	id, err := r.C.Get(ctx, r.Keys.CommandWorker(commandID)).Result()
	if Nil(err) {
		return "", nil
	}
	return id, err
}

// PublishPools records the pool templates (name → JSON).
func (r *RDB) PublishPools(ctx context.Context, templates map[string]string) error {
	if len(templates) == 0 {
		return nil
	}
	return r.C.HSet(ctx, r.Keys.Pools(), templates).Err()
}

// PoolTemplates returns the recorded pool templates (name → JSON).
func (r *RDB) PoolTemplates(ctx context.Context) (map[string]string, error) {
	return r.C.HGetAll(ctx, r.Keys.Pools()).Result()
}
