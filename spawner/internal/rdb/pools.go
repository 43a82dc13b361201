package rdb

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// Pools is the warm pools: each pool's warm set (workers ready for
// allocation), its members (every worker made for it), its counters, and
// the published templates that any reader lists.
type Pools interface {
	AddWarm(ctx context.Context, pool, id string) error
	TakeWarm(ctx context.Context, pool string) (string, error)
	DropWarm(ctx context.Context, pool, id string) (bool, error)
	Warm(ctx context.Context, pool string) ([]string, error)
	CountPool(ctx context.Context, pool string, counts map[string]int64) error
	PoolStats(ctx context.Context, pool string) (map[string]string, error)
	PublishPools(ctx context.Context, templates map[string]string) error
	PoolTemplates(ctx context.Context) (map[string]string, error)
	AddPoolMember(ctx context.Context, pool, id string) error
	DropPoolMember(ctx context.Context, pool, id string) error
	PoolMembers(ctx context.Context, pool string) ([]string, error)
}

// poolCmds implements Pools over the shared connection.
type poolCmds struct{ *core }

var _ Pools = (*poolCmds)(nil)

// AddWarm makes a warm worker ready for allocation.
func (r *poolCmds) AddWarm(ctx context.Context, pool, id string) error {
	return r.c.SAdd(ctx, ctlplane.PoolWarmSetKey(r.Keys, pool), id).Err()
}

// TakeWarm takes a warm worker of a pool for one create ("" when none).
func (r *poolCmds) TakeWarm(ctx context.Context, pool string) (string, error) {
	id, err := r.c.SPop(ctx, ctlplane.PoolWarmSetKey(r.Keys, pool)).Result()
	if Nil(err) {
		return "", nil
	}
	return id, err
}

// DropWarm takes a worker out of a pool's warm set (it is being retired);
// it reports whether it was there.
func (r *poolCmds) DropWarm(ctx context.Context, pool, id string) (bool, error) {
	n, err := r.c.SRem(ctx, ctlplane.PoolWarmSetKey(r.Keys, pool), id).Result()
	return n == 1, err
}

// Warm returns a pool's warm workers.
func (r *poolCmds) Warm(ctx context.Context, pool string) ([]string, error) {
	return r.c.SMembers(ctx, ctlplane.PoolWarmSetKey(r.Keys, pool)).Result()
}

// CountPool adds to a pool's counters.
func (r *poolCmds) CountPool(ctx context.Context, pool string, counts map[string]int64) error {
	pipe := r.c.Pipeline()
	for f, n := range counts {
		pipe.HIncrBy(ctx, ctlplane.PoolStatsKey(r.Keys, pool), f, n)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// PoolStats returns a pool's counters.
func (r *poolCmds) PoolStats(ctx context.Context, pool string) (map[string]string, error) {
	return r.c.HGetAll(ctx, ctlplane.PoolStatsKey(r.Keys, pool)).Result()
}

// PublishPools records the pool templates (name → JSON).
func (r *poolCmds) PublishPools(ctx context.Context, templates map[string]string) error {
	if len(templates) == 0 {
		return nil
	}
	return r.c.HSet(ctx, ctlplane.PoolsKey(r.Keys), templates).Err()
}

// PoolTemplates returns the recorded pool templates (name → JSON).
func (r *poolCmds) PoolTemplates(ctx context.Context) (map[string]string, error) {
	return r.c.HGetAll(ctx, ctlplane.PoolsKey(r.Keys)).Result()
}

// AddPoolMember records a worker made for a pool.
func (r *poolCmds) AddPoolMember(ctx context.Context, pool, id string) error {
	return r.c.SAdd(ctx, ctlplane.PoolMembersKey(r.Keys, pool), id).Err()
}

// DropPoolMember forgets a retired worker of a pool.
func (r *poolCmds) DropPoolMember(ctx context.Context, pool, id string) error {
	return r.c.SRem(ctx, ctlplane.PoolMembersKey(r.Keys, pool), id).Err()
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
func (r *poolCmds) PoolMembers(ctx context.Context, pool string) ([]string, error) {
	return poolMembersScript.Run(ctx, r.c, []string{ctlplane.PoolMembersKey(r.Keys, pool), r.Keys.Workers(),
		ctlplane.CreatingKey(r.Keys)}).StringSlice()
}
