package rdb

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// QueueLength returns how many creates wait for a slot.
func (r *RDB) QueueLength(ctx context.Context) (int64, error) {
	return r.C.LLen(ctx, ctlplane.CreationQueueKey(r.Keys)).Result()
}

// AddWarm makes a warm worker ready for allocation.
func (r *RDB) AddWarm(ctx context.Context, pool, id string) error {
	return r.C.SAdd(ctx, ctlplane.PoolWarmSetKey(r.Keys, pool), id).Err()
}

// TakeWarm takes a warm worker of a pool for one create ("" when none).
func (r *RDB) TakeWarm(ctx context.Context, pool string) (string, error) {
	id, err := r.C.SPop(ctx, ctlplane.PoolWarmSetKey(r.Keys, pool)).Result()
	if Nil(err) {
		return "", nil
	}
	return id, err
}

// DropWarm takes a worker out of a pool's warm set (it is being retired);
// it reports whether it was there.
func (r *RDB) DropWarm(ctx context.Context, pool, id string) (bool, error) {
	n, err := r.C.SRem(ctx, ctlplane.PoolWarmSetKey(r.Keys, pool), id).Result()
	return n == 1, err
}

// Warm returns a pool's warm workers.
func (r *RDB) Warm(ctx context.Context, pool string) ([]string, error) {
	return r.C.SMembers(ctx, ctlplane.PoolWarmSetKey(r.Keys, pool)).Result()
}

// CountPool adds to a pool's counters.
func (r *RDB) CountPool(ctx context.Context, pool string, counts map[string]int64) error {
	pipe := r.C.Pipeline()
	for f, n := range counts {
		pipe.HIncrBy(ctx, ctlplane.PoolStatsKey(r.Keys, pool), f, n)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// PoolStats returns a pool's counters.
func (r *RDB) PoolStats(ctx context.Context, pool string) (map[string]string, error) {
	return r.C.HGetAll(ctx, ctlplane.PoolStatsKey(r.Keys, pool)).Result()
}

// CommandWorkerOf returns the worker id a create command made, "" when
// none yet.
func (r *RDB) CommandWorkerOf(ctx context.Context, commandID string) (string, error) {
	id, err := r.C.Get(ctx, ctlplane.CommandWorkerKey(r.Keys, commandID)).Result()
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
	return r.C.HSet(ctx, ctlplane.PoolsKey(r.Keys), templates).Err()
}

// PoolTemplates returns the recorded pool templates (name → JSON).
func (r *RDB) PoolTemplates(ctx context.Context) (map[string]string, error) {
	return r.C.HGetAll(ctx, ctlplane.PoolsKey(r.Keys)).Result()
}

// AddPoolMember records a worker made for a pool.
func (r *RDB) AddPoolMember(ctx context.Context, pool, id string) error {
	return r.C.SAdd(ctx, ctlplane.PoolMembersKey(r.Keys, pool), id).Err()
}

// DropPoolMember forgets a retired worker of a pool.
func (r *RDB) DropPoolMember(ctx context.Context, pool, id string) error {
	return r.C.SRem(ctx, ctlplane.PoolMembersKey(r.Keys, pool), id).Err()
}

// poolMembersScript: KEYS members, workers, creating (a sorted set of
// leases). It returns the
// members in the workers set and drops those neither there nor still
// being created (retired, or a create that failed).
var poolMembersScript = redis.NewScript(`
local live = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('SISMEMBER', KEYS[2], id) == 1 then
    live[#live + 1] = id
  elseif not redis.call('ZSCORE', KEYS[3], id) then
    redis.call('SREM', KEYS[1], id)
  end
end
return live
`)

// PoolMembers returns the workers of a pool that joined and are not
// retired, in one round trip, reading only the pool's own members.
func (r *RDB) PoolMembers(ctx context.Context, pool string) ([]string, error) {
	return poolMembersScript.Run(ctx, r.C, []string{ctlplane.PoolMembersKey(r.Keys, pool), r.Keys.Workers(),
		ctlplane.CreatingKey(r.Keys)}).StringSlice()
}
