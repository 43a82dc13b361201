package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Admission: a create waits in the creation queue (a FIFO list, each
// member leased in CreationLeases) until it is at the head and a slot is
// free, then moves to Creating (leased) until its worker joins Workers.
// Slots in use = Workers + Creating + Retiring. A lease that runs out
// (its manager died) drops the create from the queue or frees its slot;
// no cleanup waits on a defer.

// admitScript: KEYS queue, queue leases, creating, workers, retiring;
// ARGV id, now ms, lease ms, max, "1" for a replacement (it takes the
// slot its dead predecessor, still in Retiring, is giving back: no queue,
// no limit). Returns {admitted 0|1, slots used,
// position in the queue (0 = head)}.
var admitScript = redis.NewScript(`
local now = tonumber(ARGV[2])
local exp = now + tonumber(ARGV[3])
for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('LREM', KEYS[1], 0, d)
  redis.call('ZREM', KEYS[2], d)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local used = redis.call('SCARD', KEYS[4]) + redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[5])
if redis.call('ZSCORE', KEYS[3], ARGV[1]) or ARGV[5] == '1' then
  redis.call('ZADD', KEYS[3], exp, ARGV[1])
  return {1, used, 0}
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then redis.call('RPUSH', KEYS[1], ARGV[1]) end
redis.call('ZADD', KEYS[2], exp, ARGV[1])
local pos = redis.call('LPOS', KEYS[1], ARGV[1])
if pos == 0 and used < tonumber(ARGV[4]) then
  redis.call('LPOP', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZADD', KEYS[3], exp, ARGV[1])
  return {1, used + 1, 0}
end
return {0, used, pos}
`)

// Admit queues the create id (or renews its place) and admits it when it
// is at the head of the queue and fewer than max slots are used. It
// returns whether it was admitted, the slots used and its queue position.
func (r *RDB) Admit(ctx context.Context, id string, now time.Time, lease time.Duration, max int, replacement bool) (bool, int, int, error) {
	repl := "0"
	if replacement {
		repl = "1"
	}
	k := r.Keys
	res, err := admitScript.Run(ctx, r.C, []string{k.CreationQueue(), k.CreationLeases(), k.Creating(), k.Workers(), k.Retiring()},
		id, ms(now), lease.Milliseconds(), max, repl).Int64Slice()
	if err != nil {
		return false, 0, 0, err
	}
	return res[0] == 1, int(res[1]), int(res[2]), nil
}

// leaveScript: KEYS queue, queue leases, creating; ARGV id.
var leaveScript = redis.NewScript(`
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
`)

// Leave takes the create id out of the queue and gives its slot back
// (a create that gave up or failed before its worker joined Workers).
func (r *RDB) Leave(ctx context.Context, id string) error {
	k := r.Keys
	return leaveScript.Run(ctx, r.C, []string{k.CreationQueue(), k.CreationLeases(), k.Creating()}, id).Err()
}

// RenewCreating extends the lease of an admitted create; false when the
// lease was lost (it ran out and the slot went to another create).
func (r *RDB) RenewCreating(ctx context.Context, id string, now time.Time, lease time.Duration) (bool, error) {
	n, err := r.C.ZAddArgs(ctx, r.Keys.Creating(), redis.ZAddArgs{XX: true, Ch: true,
		Members: []redis.Z{{Score: float64(ms(now.Add(lease))), Member: id}}}).Result()
	if err != nil {
		return false, err
	}
	if n == 0 {
		// Not changed: gone, or renewed to the same expiry: check.
		_, err := r.C.ZScore(ctx, r.Keys.Creating(), id).Result()
		if Nil(err) {
			return false, nil
		}
		return err == nil, err
	}
	return true, nil
}

// joinScript: KEYS creating, workers; ARGV id. The admitted create's slot
// becomes its worker's membership of Workers.
var joinScript = redis.NewScript(`
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 1 end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('SADD', KEYS[2], ARGV[1])
  return 1
end
return 0
`)

// Join makes an admitted create's worker a member of Workers, in place of
// its Creating lease; false when that lease was lost.
func (r *RDB) Join(ctx context.Context, id string) (bool, error) {
	n, err := joinScript.Run(ctx, r.C, []string{r.Keys.Creating(), r.Keys.Workers()}, id).Int()
	return n == 1, err
}

// Slots returns the members that hold a slot: workers, admitted creates
// and workers being retired.
func (r *RDB) Slots(ctx context.Context) (workers, creating, retiring []string, err error) {
	pipe := r.C.Pipeline()
	w := pipe.SMembers(ctx, r.Keys.Workers())
	c := pipe.ZRange(ctx, r.Keys.Creating(), 0, -1)
	t := pipe.ZRange(ctx, r.Keys.Retiring(), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, nil, err
	}
	return w.Val(), c.Val(), t.Val(), nil
}

// CommandWorker returns the worker id a create command made, claiming id
// for it when it made none yet (the command delivered again continues
// the same worker).
func (r *RDB) CommandWorker(ctx context.Context, commandID, id string) (string, error) {
	key := r.Keys.CommandWorker(commandID)
	ok, err := r.C.SetNX(ctx, key, id, r.Retention).Result()
	if err != nil || ok {
		return id, err
	}
	return r.C.Get(ctx, key).Result()
}
