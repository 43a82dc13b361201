package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// Admission: a create waits in the creation queue (a FIFO list, each
// member leased in CreationLeases) until it is at the head and a slot is
// free, then moves to Creating (leased) until its worker joins Workers.
// Slots in use = Workers + Creating + Retiring. A lease that runs out
// (its manager died) drops the create from the queue or frees its slot;
// no cleanup waits on a defer. A create command names the worker it made
// (CommandWorker), so that the command delivered again continues it.
type Admission interface {
	Admit(ctx context.Context, id string, now time.Time, lease time.Duration, mode, me string, candidates []HostSlots) (AdmitResult, error)
	Leave(ctx context.Context, id string) error
	RenewCreating(ctx context.Context, id string, now time.Time, lease time.Duration) (bool, error)
	Join(ctx context.Context, id string) (bool, error)
	Slots(ctx context.Context) (workers, creating, retiring []string, err error)
	Workers(ctx context.Context) ([]string, error)
	IsWorker(ctx context.Context, id string) (bool, error)
	QueueLength(ctx context.Context) (int64, error)
	QueuedCreates(ctx context.Context, n int64) ([]string, error)
	CommandWorker(ctx context.Context, commandID, id string) (string, error)
	CommandWorkerOf(ctx context.Context, commandID string) (string, error)
}

// admissionCmds implements Admission over the shared connection.
type admissionCmds struct{ *core }

var _ Admission = (*admissionCmds)(nil)

// admitScript: KEYS queue, queue leases, creating, workers, retiring,
// placement; ARGV id, now ms, lease ms, mode, the caller's host, then
// candidate hosts as pairs (host, max) in order of preference. Modes:
//   - "queue": the create waits its turn in the FIFO; at the head it is
//     admitted to the candidate with the most free slots (the first one
//     on a tie);
//   - "try": admitted at once to a candidate with room when no create
//     waits, else not at all (a pool refill gives way);
//   - "replace": admitted on the caller's host with no queue and no
//     limit (it takes the slot its dead predecessor, still in Retiring,
//     is giving back there).
//
// A create already admitted renews its slot where it was placed. The
// slots used on a host are the workers, admitted creates and workers
// being retired placed on it (the caller's host for a record from before
// placement). Returns {admitted 0|1, host, position (0 = head), 1 when
// no candidate had room}.
var admitScript = redis.NewScript(`
local now = tonumber(ARGV[2])
local exp = now + tonumber(ARGV[3])
local mode, me = ARGV[4], ARGV[5]
for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('LREM', KEYS[1], 0, d)
  redis.call('ZREM', KEYS[2], d)
end
for _, d in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[3], d)
  if redis.call('SISMEMBER', KEYS[4], d) == 0 and not redis.call('ZSCORE', KEYS[5], d) then
    redis.call('HDEL', KEYS[6], d)
  end
end
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('ZADD', KEYS[3], exp, ARGV[1])
  return {1, redis.call('HGET', KEYS[6], ARGV[1]) or me, 0, 0}
end
if mode == 'replace' then
  redis.call('ZADD', KEYS[3], exp, ARGV[1])
  redis.call('HSET', KEYS[6], ARGV[1], me)
  return {1, me, 0, 0}
end
local used = {}
local function count(ids)
  for _, id in ipairs(ids) do
    local h = redis.call('HGET', KEYS[6], id) or me
    used[h] = (used[h] or 0) + 1
  end
end
count(redis.call('SMEMBERS', KEYS[4]))
count(redis.call('ZRANGE', KEYS[3], 0, -1))
count(redis.call('ZRANGE', KEYS[5], 0, -1))
local best, room = false, 0
for i = 6, #ARGV, 2 do
  local free = tonumber(ARGV[i + 1]) - (used[ARGV[i]] or 0)
  if free > room then best, room = ARGV[i], free end
end
local full = 1
if best then full = 0 end
local pos = 0
if mode == 'try' then
  if redis.call('LLEN', KEYS[1]) > 0 or not best then return {0, '', 0, full} end
else
  if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then redis.call('RPUSH', KEYS[1], ARGV[1]) end
  redis.call('ZADD', KEYS[2], exp, ARGV[1])
  pos = redis.call('LPOS', KEYS[1], ARGV[1])
  if pos ~= 0 or not best then return {0, '', pos, full} end
  redis.call('LPOP', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
redis.call('ZADD', KEYS[3], exp, ARGV[1])
redis.call('HSET', KEYS[6], ARGV[1], best)
return {1, best, 0, 0}
`)

// Admission modes (see admitScript).
const (
	AdmitQueue   = "queue"
	AdmitTry     = "try"
	AdmitReplace = "replace"
)

// HostSlots is a host a create may be placed on, and its limit.
type HostSlots struct {
	Host string
	Max  int
}

// AdmitResult is the outcome of one admission attempt.
type AdmitResult struct {
	OK   bool   // admitted: the create holds a slot on Host
	Host string // where it is placed
	Pos  int    // its place in the queue (0: the head)
	Full bool   // no candidate host had a free slot
}

// Admit queues the create id (or renews its place) and admits it, per
// mode, to one of the candidate hosts (see admitScript); me is the
// caller's host.
func (r *admissionCmds) Admit(ctx context.Context, id string, now time.Time, lease time.Duration, mode, me string, candidates []HostSlots) (AdmitResult, error) {
	k := r.Keys
	args := []any{id, ms(now), lease.Milliseconds(), mode, me}
	for _, c := range candidates {
		args = append(args, c.Host, c.Max)
	}
	res, err := admitScript.Run(ctx, r.c, []string{ctlplane.CreationQueueKey(k), ctlplane.CreationLeasesKey(k), ctlplane.CreatingKey(k), k.Workers(), ctlplane.RetiringKey(k), k.Placement()},
		args...).Slice()
	if err != nil {
		return AdmitResult{}, err
	}
	if len(res) != 4 {
		return AdmitResult{}, fmt.Errorf("rdb: admission answered %v", res)
	}
	ok, _ := res[0].(int64)
	host, _ := res[1].(string)
	pos, _ := res[2].(int64)
	full, _ := res[3].(int64)
	return AdmitResult{OK: ok == 1, Host: host, Pos: int(pos), Full: full == 1}, nil
}

// leaveScript: KEYS queue, queue leases, creating, placement; ARGV id.
var leaveScript = redis.NewScript(`
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
`)

// Leave takes the create id out of the queue and gives its slot back
// (a create that gave up or failed before its worker joined Workers).
func (r *admissionCmds) Leave(ctx context.Context, id string) error {
	k := r.Keys
	return leaveScript.Run(ctx, r.c, []string{ctlplane.CreationQueueKey(k), ctlplane.CreationLeasesKey(k), ctlplane.CreatingKey(k), k.Placement()}, id).Err()
}

// RenewCreating extends the lease of an admitted create; false when the
// lease was lost (it ran out and the slot went to another create).
func (r *admissionCmds) RenewCreating(ctx context.Context, id string, now time.Time, lease time.Duration) (bool, error) {
	n, err := r.c.ZAddArgs(ctx, ctlplane.CreatingKey(r.Keys), redis.ZAddArgs{XX: true, Ch: true,
		Members: []redis.Z{{Score: float64(ms(now.Add(lease))), Member: id}}}).Result()
	if err != nil {
		return false, err
	}
	if n == 0 {
		// Not changed: gone, or renewed to the same expiry: check.
		_, err := r.c.ZScore(ctx, ctlplane.CreatingKey(r.Keys), id).Result()
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
func (r *admissionCmds) Join(ctx context.Context, id string) (bool, error) {
	n, err := joinScript.Run(ctx, r.c, []string{ctlplane.CreatingKey(r.Keys), r.Keys.Workers()}, id).Int()
	return n == 1, err
}

// Slots returns the members that hold a slot: workers, admitted creates
// and workers being retired.
func (r *admissionCmds) Slots(ctx context.Context) (workers, creating, retiring []string, err error) {
	pipe := r.c.Pipeline()
	w := pipe.SMembers(ctx, r.Keys.Workers())
	c := pipe.ZRange(ctx, ctlplane.CreatingKey(r.Keys), 0, -1)
	t := pipe.ZRange(ctx, ctlplane.RetiringKey(r.Keys), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, nil, err
	}
	return w.Val(), c.Val(), t.Val(), nil
}

// Workers returns the ids of the workers set: every worker made and not
// yet retired.
func (r *admissionCmds) Workers(ctx context.Context) ([]string, error) {
	return r.c.SMembers(ctx, r.Keys.Workers()).Result()
}

// IsWorker reports whether id is in the workers set.
func (r *admissionCmds) IsWorker(ctx context.Context, id string) (bool, error) {
	return r.c.SIsMember(ctx, r.Keys.Workers(), id).Result()
}

// QueueLength returns how many creates wait for a slot.
func (r *admissionCmds) QueueLength(ctx context.Context) (int64, error) {
	return r.c.LLen(ctx, ctlplane.CreationQueueKey(r.Keys)).Result()
}

// QueuedCreates returns up to n creates waiting for a slot, oldest first.
func (r *admissionCmds) QueuedCreates(ctx context.Context, n int64) ([]string, error) {
	return r.c.LRange(ctx, ctlplane.CreationQueueKey(r.Keys), 0, n-1).Result()
}

// CommandWorker returns the worker id a create command made, claiming id
// for it when it made none yet (the command delivered again continues
// the same worker).
func (r *admissionCmds) CommandWorker(ctx context.Context, commandID, id string) (string, error) {
	key := ctlplane.CommandWorkerKey(r.Keys, commandID)
	ok, err := r.c.SetNX(ctx, key, id, r.Retention).Result()
	if err != nil || ok {
		return id, err
	}
	return r.c.Get(ctx, key).Result()
}

// CommandWorkerOf returns the worker id a create command made, "" when
// none yet.
func (r *admissionCmds) CommandWorkerOf(ctx context.Context, commandID string) (string, error) {
	id, err := r.c.Get(ctx, ctlplane.CommandWorkerKey(r.Keys, commandID)).Result()
	if Nil(err) {
		return "", nil
	}
	return id, err
}
