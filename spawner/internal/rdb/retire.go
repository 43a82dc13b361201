package rdb

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// Retirement: a worker leaves Workers for Retiring (leased) in one step,
// so exactly one caller retires it and nothing judges it meanwhile; the
// retirement ends with its removal from Retiring. A retirement whose
// lease ran out (its manager died) is taken over and done again: each of
// its steps is idempotent.
type Retirement interface {
	BeginRetire(ctx context.Context, id, reason string, now time.Time, lease time.Duration) (owns, takeover bool, err error)
	RenewRetire(ctx context.Context, id string, now time.Time, lease time.Duration) error
	StaleRetirements(ctx context.Context, now time.Time) ([]string, error)
	EndRetire(ctx context.Context, id string, kind protocol.Kind, agent protocol.AgentType, project string, now time.Time) error
	Retired(ctx context.Context, since time.Time) ([]string, error)
	Revive(ctx context.Context, id string) (bool, error)
	ForgetWorkerKeys(ctx context.Context, id string) error
}

// retireCmds implements Retirement over the shared connection.
type retireCmds struct{ *core }

var _ Retirement = (*retireCmds)(nil)

// beginRetireScript: KEYS workers, retiring, status; ARGV id, lease
// expiry ms, now ms, reason, now (RFC 3339). Returns 1 when the worker
// left Workers now, 2 when an expired retirement was taken over, 0 when
// the worker is retired or being retired by someone else.
var beginRetireScript = script(`
if redis.call('SREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  redis.call('HSET', KEYS[3], '` + protocol.StatusFieldRetireReason + `', ARGV[4], '` + protocol.StatusFieldRetiredAt + `', ARGV[5])
  return 1
end
local exp = redis.call('ZSCORE', KEYS[2], ARGV[1])
if exp and tonumber(exp) <= tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  return 2
end
return 0
`)

// BeginRetire takes a worker out of Workers into Retiring; it reports
// whether the caller now owns the retirement and whether it takes over
// one that a dead manager began.
func (r *retireCmds) BeginRetire(ctx context.Context, id, reason string, now time.Time, lease time.Duration) (owns, takeover bool, err error) {
	n, err := beginRetireScript.Run(ctx, r.c, []string{r.Keys.Workers(), ctlplane.RetiringKey(r.Keys), r.Keys.Status(id)},
		id, ms(now.Add(lease)), ms(now), reason, protocol.FormatTime(now)).Int()
	return n > 0, n == 2, err
}

// RenewRetire extends a retirement's lease.
func (r *retireCmds) RenewRetire(ctx context.Context, id string, now time.Time, lease time.Duration) error {
	return r.c.ZAddXX(ctx, ctlplane.RetiringKey(r.Keys), redis.Z{Score: float64(ms(now.Add(lease))), Member: id}).Err()
}

// StaleRetirements returns the retirements whose lease ran out.
func (r *retireCmds) StaleRetirements(ctx context.Context, now time.Time) ([]string, error) {
	return r.c.ZRangeByScore(ctx, ctlplane.RetiringKey(r.Keys), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(ms(now), 10)}).Result()
}

// releaseHoldScript: KEYS session hash; ARGV worker id. A project's
// session stops naming a retired worker as its holder.
var releaseHoldScript = script(`
if redis.call('HGET', KEYS[1], '$SESSION_WORKER') == ARGV[1] then
  redis.call('HDEL', KEYS[1], '$SESSION_WORKER', '$SESSION_WORKER_EXPIRES', '$SESSION_WORKER_EXPIRES_MS')
  return 1
end
return 0
`)

// EndRetire finishes a retirement: the project session hold of the worker
// is released, its keys expire after the retention (its status hash and
// history, heartbeat, and for a long-lived worker its input and output streams),
// and it leaves Retiring.
func (r *retireCmds) EndRetire(ctx context.Context, id string, kind protocol.Kind, agent protocol.AgentType, project string, now time.Time) error {
	k := r.Keys
	if project != "" && agent != "" {
		if err := releaseHoldScript.Run(ctx, r.c, []string{k.Session(agent, project)}, id).Err(); err != nil {
			return err
		}
	}
	pipe := r.c.TxPipeline()
	keys := []string{k.Status(id), k.StatusHistory(id), k.UsageWorker(id)}
	if kind != protocol.KindDeveloper {
		keys = append(keys, k.Input(id), k.Output(id))
	}
	for _, key := range keys {
		pipe.Expire(ctx, key, r.Retention)
	}
	pipe.Del(ctx, k.Heartbeat(id))
	pipe.ZRem(ctx, k.DeveloperIdle(), id)
	pipe.ZRem(ctx, ctlplane.RetiringKey(k), id)
	if kind != protocol.KindDeveloper {
		pipe.ZAdd(ctx, ctlplane.RetiredKey(k), redis.Z{Score: float64(ms(now)), Member: id})
	}
	pipe.HDel(ctx, k.Placement(), id)
	_, err := pipe.Exec(ctx)
	return err
}

// ForgetWorkerKeys deletes at once a worker's status hash, history,
// heartbeat and its own input and output streams: for an identity that
// ends with no retirement (a warm worker whose container a woken worker
// took), whose keys nothing is left to read.
func (r *retireCmds) ForgetWorkerKeys(ctx context.Context, id string) error {
	k := r.Keys
	return r.c.Del(ctx, k.Status(id), k.StatusHistory(id), k.Heartbeat(id), k.Input(id), k.Output(id)).Err()
}

// Retired returns the long-lived workers retired since since (older ones
// are dropped from the set: their retention is over).
func (r *retireCmds) Retired(ctx context.Context, since time.Time) ([]string, error) {
	key := ctlplane.RetiredKey(r.Keys)
	if err := r.c.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(ms(since), 10)).Err(); err != nil {
		return nil, err
	}
	return r.c.ZRange(ctx, key, 0, -1).Result()
}

// reviveScript: KEYS workers, retiring, status, heartbeat; ARGV id. A
// worker whose retirement its owner turned into a new incarnation comes
// back into Workers under its id; the old incarnation's heartbeat goes.
// Returns 1 when it left Retiring now, 0 when it was not there.
var reviveScript = script(`
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], '` + protocol.StatusFieldRetireReason + `', '` + protocol.StatusFieldRetiredAt + `')
redis.call('DEL', KEYS[4])
return 1
`)

// Revive moves a worker the caller is retiring from Retiring back into
// Workers (its slot stays taken throughout); false when it was not being
// retired.
func (r *retireCmds) Revive(ctx context.Context, id string) (bool, error) {
	n, err := reviveScript.Run(ctx, r.c, []string{r.Keys.Workers(), ctlplane.RetiringKey(r.Keys), r.Keys.Status(id), r.Keys.Heartbeat(id)}, id).Int()
	return n == 1, err
}
