package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/redis/go-redis/v9"
)

// Events is what the publisher's outbox writes, in order, while Redis
// answers: stream entries (lifecycle, progress, control), the status and
// run hashes, the status history, the developer idle set; and the
// heartbeat key removed at the end.
type Events interface {
	XAdd(ctx context.Context, stream string, doc []byte) error
	HSet(ctx context.Context, key string, fields map[string]any) error
	AdvanceRun(ctx context.Context, requestID string, fields map[string]any) error
	PushCapped(ctx context.Context, key string, doc []byte, max int64) error
	SetIdle(ctx context.Context, key, member string, idle bool, at time.Time) error
	Del(ctx context.Context, keys ...string) error
}

// eventCmds implements Events over the shared connection.
type eventCmds struct{ *core }

var _ Events = (*eventCmds)(nil)

// advanceRunScript writes fields of a run hash without ever moving its
// state backward: a terminal run is left alone; a status older than the
// stored one (a requeued task starting again at requested while the hash
// says running) is not written, nor is the creation time of a run that
// exists. The other fields are written.
//
// KEYS[1] run hash; ARGV[1] the status field, ARGV[2] the creation time
// field, ARGV[3...] field/value pairs.
var advanceRunScript = redis.NewScript(`
local order = {requested = 1, queued = 2, running = 3, completed = 4, failed = 4}
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and order[cur] == 4 then return 0 end
local args = {}
for i = 3, #ARGV, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  local keep = true
  if f == ARGV[1] and cur and (order[v] or 0) < (order[cur] or 0) then keep = false end
  if f == ARGV[2] and cur then keep = false end
  if keep then
    args[#args + 1] = f
    args[#args + 1] = v
  end
end
if #args > 0 then redis.call('HSET', KEYS[1], unpack(args)) end
return 1
`)

// AdvanceRun writes fields of a run hash (with its status), never moving
// the run backward nor changing a terminal one.
func (r *eventCmds) AdvanceRun(ctx context.Context, requestID string, fields map[string]any) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	args := []any{protocol.RunFieldStatus, protocol.RunFieldCreatedAt}
	for k, v := range fields {
		args = append(args, k, v)
	}
	if err := advanceRunScript.Run(ctx, r.c, []string{r.Keys.Run(requestID)}, args...).Err(); err != nil {
		return fmt.Errorf("rdb: update run %s: %w", requestID, err)
	}
	return nil
}

// HSet sets fields of a hash.
func (r *eventCmds) HSet(ctx context.Context, key string, fields map[string]any) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.HSet(ctx, key, fields).Err()
}

// XAdd appends a protocol document to a stream, trimmed to about
// StreamMaxLen entries.
func (r *eventCmds) XAdd(ctx context.Context, stream string, doc []byte) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.XAdd(ctx, r.xaddArgs(stream, doc)).Err()
}

func (r *core) xaddArgs(stream string, doc []byte) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc), MaxLen: r.StreamMaxLen, Approx: r.StreamMaxLen > 0}
}

// Del deletes keys.
func (r *eventCmds) Del(ctx context.Context, keys ...string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.Del(ctx, keys...).Err()
}

// PushCapped prepends doc to a list and keeps its max newest entries.
func (r *eventCmds) PushCapped(ctx context.Context, key string, doc []byte, max int64) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, doc)
		p.LTrim(ctx, key, 0, max-1)
		return nil
	})
	return err
}

// SetIdle puts member in the sorted set key with score at (unix ms), or
// takes it out when idle is false.
func (r *eventCmds) SetIdle(ctx context.Context, key, member string, idle bool, at time.Time) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	if idle {
		return r.c.ZAdd(ctx, key, redis.Z{Score: float64(at.UnixMilli()), Member: member}).Err()
	}
	return r.c.ZRem(ctx, key, member).Err()
}
