// Package rdb owns every Redis call and Lua script of the spawner. Names
// come from protocol.Keys; no other package of the spawner spells a key or
// runs a script. Every script is idempotent: run twice (a client retry
// after a lost reply), it leaves Redis as one run does.
package rdb

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// RDB is the spawner's view of Redis.
type RDB struct {
	C    redis.Cmdable
	Keys protocol.Keys
	// Retention of what the spawner writes (zero values: the defaults).
	StreamMaxLen int64         // approximate MAXLEN of the lifecycle stream and reply streams
	ReplyTTL     time.Duration // a reply stream expires this long after its last reply
	Retention    time.Duration // a retired worker's keys live this long
	RunRetention time.Duration // a run the spawner answered lives this long
	// Wait is WAIT's policy for the entries a client must not lose to a
	// failover (Send: a task, a command); off when zero.
	Wait protocol.WaitPolicy
}

// Defaults of the retention settings.
const (
	DefaultReplyTTL  = time.Hour
	DefaultRetention = 24 * time.Hour
)

// New returns an RDB over c with the default retention.
func New(c redis.Cmdable, keys protocol.Keys) *RDB {
	return &RDB{C: c, Keys: keys, StreamMaxLen: protocol.DefaultStreamMaxLen, ReplyTTL: DefaultReplyTTL, Retention: DefaultRetention,
		RunRetention: protocol.DefaultRunRetention}
}

// Nil reports whether err is Redis's "no such key" answer.
func Nil(err error) bool { return errors.Is(err, redis.Nil) }

// Ping checks the connection.
func (r *RDB) Ping(ctx context.Context) error { return r.C.Ping(ctx).Err() }

func ms(t time.Time) int64 { return t.UnixMilli() }

// xadd adds an entry with the approximate MAXLEN.
func (r *RDB) xadd(ctx context.Context, stream string, doc []byte) error {
	return r.C.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: r.StreamMaxLen, Approx: true, Values: protocol.Values(doc)}).Err()
}

// AddEntry appends a document to a stream (MAXLEN ~ StreamMaxLen).
func (r *RDB) AddEntry(ctx context.Context, stream string, doc []byte) error {
	return r.xadd(ctx, stream, doc)
}

// Lifecycle publishes a lifecycle event.
func (r *RDB) Lifecycle(ctx context.Context, l protocol.Lifecycle) error {
	doc, err := l.Encode()
	if err != nil {
		return err
	}
	return r.xadd(ctx, r.Keys.Lifecycle(), doc)
}

// Reply writes a command's reply on the stream the command named, renews
// that stream's expiry and acknowledges the command's entry (stream,
// group, id), in one transaction: a command is answered and acknowledged
// together or not at all (then executed again, idempotently, and
// answered).
func (r *RDB) Reply(ctx context.Context, replyTo string, doc []byte, stream, group, id string) error {
	_, err := r.C.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: replyTo, MaxLen: r.StreamMaxLen, Approx: true, Values: protocol.Values(doc)})
		p.Expire(ctx, replyTo, r.ReplyTTL)
		p.XAck(ctx, stream, group, id)
		return nil
	})
	return err
}

// WriteStatus sets fields of a worker's status hash (updated_at included).
// A write of the container's state keeps host's paused set
// (Keys.HostPaused) in step, in the same transaction: the set holds the
// workers of the host whose hash says paused. host is the worker's.
func (r *RDB) WriteStatus(ctx context.Context, id, host string, now time.Time, fields map[string]any) error {
	if _, ok := fields[protocol.StatusFieldContainer]; !ok {
		fields[protocol.StatusFieldUpdatedAt] = protocol.FormatTime(now)
		return r.C.HSet(ctx, r.Keys.Status(id), fields).Err()
	}
	_, err := r.C.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r.queueStatus(ctx, p, id, host, now, fields)
		return nil
	})
	return err
}

// queueStatus queues WriteStatus's commands on a transaction.
func (r *RDB) queueStatus(ctx context.Context, p redis.Pipeliner, id, host string, now time.Time, fields map[string]any) {
	fields[protocol.StatusFieldUpdatedAt] = protocol.FormatTime(now)
	p.HSet(ctx, r.Keys.Status(id), fields)
	if c, ok := fields[protocol.StatusFieldContainer]; ok {
		if c == string(protocol.ContainerPaused) {
			p.SAdd(ctx, ctlplane.HostPausedKey(r.Keys, host), id)
		} else {
			p.SRem(ctx, ctlplane.HostPausedKey(r.Keys, host), id)
		}
	}
}

// Started records a worker whose container a create just started: its
// status fields (WriteStatus), its lifecycle event, and returns its status
// hash as it is then, in one round trip.
func (r *RDB) Started(ctx context.Context, id, host string, now time.Time, fields map[string]any, l protocol.Lifecycle) (map[string]string, error) {
	doc, err := l.Encode()
	if err != nil {
		return nil, err
	}
	var h *redis.MapStringStringCmd
	_, err = r.C.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r.queueStatus(ctx, p, id, host, now, fields)
		p.XAdd(ctx, &redis.XAddArgs{Stream: r.Keys.Lifecycle(), MaxLen: r.StreamMaxLen, Approx: true, Values: protocol.Values(doc)})
		h = p.HGetAll(ctx, r.Keys.Status(id))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h.Val(), nil
}

// Paused returns the workers of host whose status says paused
// (Keys.HostPaused).
func (r *RDB) Paused(ctx context.Context, host string) ([]string, error) {
	return r.C.SMembers(ctx, ctlplane.HostPausedKey(r.Keys, host)).Result()
}

// syncPausedScript: KEYS host's paused set, workers set, then the status
// hash of each id; ARGV the ids. Each id is put in the set or taken out
// of it as its status hash says now, and is taken out when it is no
// member of Workers: what WriteStatus keeps, made true again whatever
// happened before (a manager of an older version, a hand-edited hash).
var syncPausedScript = script(`
for i, id in ipairs(ARGV) do
  if redis.call('SISMEMBER', KEYS[2], id) == 1 and redis.call('HGET', KEYS[i + 2], '$CONTAINER') == '$PAUSED' then
    redis.call('SADD', KEYS[1], id)
  else
    redis.call('SREM', KEYS[1], id)
  end
end
return 1
`)

// SyncPaused repairs host's paused set for the given workers (its
// reconciler passes the host's members and the set's own members).
func (r *RDB) SyncPaused(ctx context.Context, host string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	keys := []string{ctlplane.HostPausedKey(r.Keys, host), r.Keys.Workers()}
	args := make([]any, len(ids))
	for i, id := range ids {
		keys = append(keys, r.Keys.Status(id))
		args[i] = id
	}
	return syncPausedScript.Run(ctx, r.C, keys, args...).Err()
}

// Status returns a worker's status hash (empty when none).
func (r *RDB) Status(ctx context.Context, id string) (map[string]string, error) {
	return r.C.HGetAll(ctx, r.Keys.Status(id)).Result()
}

// StatusField returns one field of a worker's status hash ("" when none).
func (r *RDB) StatusField(ctx context.Context, id, field string) (string, error) {
	v, err := r.C.HGet(ctx, r.Keys.Status(id), field).Result()
	if Nil(err) {
		return "", nil
	}
	return v, err
}

// StatusValues returns fields of a worker's status hash, in order ("" for
// a field it lacks).
func (r *RDB) StatusValues(ctx context.Context, id string, fields ...string) ([]string, error) {
	vals, err := r.C.HMGet(ctx, r.Keys.Status(id), fields...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i], _ = v.(string)
	}
	return out, nil
}

// PushHistory pushes a transition on a worker's history, kept to its
// protocol.MaxStatusHistory newest entries.
func (r *RDB) PushHistory(ctx context.Context, id string, rec protocol.TransitionRecord) error {
	doc, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	key := r.Keys.StatusHistory(id)
	_, err = r.C.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, doc)
		p.LTrim(ctx, key, 0, protocol.MaxStatusHistory-1)
		return nil
	})
	return err
}

// Heartbeat returns a worker's heartbeat document (nil when expired).
func (r *RDB) Heartbeat(ctx context.Context, id string) ([]byte, error) {
	b, err := r.C.Get(ctx, r.Keys.Heartbeat(id)).Bytes()
	if Nil(err) {
		return nil, nil
	}
	return b, err
}

// StatusFields returns, for each of ids, the given fields of its status
// hash ("" for a missing one) and, with heartbeats, its heartbeat document
// (nil when expired), in one round trip: what the host leader's loops
// read of every worker each tick, without the spec and instructions that
// a whole hash carries.
func (r *RDB) StatusFields(ctx context.Context, ids, fields []string, heartbeats bool) ([]map[string]string, [][]byte, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	pipe := r.C.Pipeline()
	hs := make([]*redis.SliceCmd, len(ids))
	var bs []*redis.StringCmd
	if heartbeats {
		bs = make([]*redis.StringCmd, len(ids))
	}
	for i, id := range ids {
		hs[i] = pipe.HMGet(ctx, r.Keys.Status(id), fields...)
		if heartbeats {
			bs[i] = pipe.Get(ctx, r.Keys.Heartbeat(id))
		}
	}
	_, _ = pipe.Exec(ctx) // each command's error is its own: an expired heartbeat is redis.Nil
	out := make([]map[string]string, len(ids))
	var beats [][]byte
	if heartbeats {
		beats = make([][]byte, len(ids))
	}
	for i := range ids {
		vals, err := hs[i].Result()
		if err != nil {
			return nil, nil, err
		}
		out[i] = make(map[string]string, len(fields))
		for j, v := range vals {
			if str, ok := v.(string); ok {
				out[i][fields[j]] = str
			}
		}
		if heartbeats {
			b, err := bs[i].Bytes()
			if err != nil && !Nil(err) {
				return nil, nil, err
			}
			beats[i] = b
		}
	}
	return out, beats, nil
}

// WorkersPlaced returns the ids of the workers set and the placement hash
// (worker id → host), in one round trip.
func (r *RDB) WorkersPlaced(ctx context.Context) ([]string, map[string]string, error) {
	pipe := r.C.Pipeline()
	w := pipe.SMembers(ctx, r.Keys.Workers())
	p := pipe.HGetAll(ctx, r.Keys.Placement())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, err
	}
	return w.Val(), p.Val(), nil
}

// Workers returns the ids of the workers set: every worker made and not
// yet retired.
func (r *RDB) Workers(ctx context.Context) ([]string, error) {
	return r.C.SMembers(ctx, r.Keys.Workers()).Result()
}

// IsWorker reports whether id is in the workers set.
func (r *RDB) IsWorker(ctx context.Context, id string) (bool, error) {
	return r.C.SIsMember(ctx, r.Keys.Workers(), id).Result()
}

// EnsureGroup creates a consumer group (and its stream) when missing.
func (r *RDB) EnsureGroup(ctx context.Context, stream, group string) error {
	err := r.C.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return err
	}
	return nil
}

// ForgetSession removes a project's session record and stored context.
func (r *RDB) ForgetSession(ctx context.Context, agent protocol.AgentType, project string) error {
	return r.C.Del(ctx, r.Keys.Session(agent, project), r.Keys.ProjectContext(project)).Err()
}

// PausedSince returns when a worker's status hash last changed, the time
// its pause was recorded for a paused worker.
func (r *RDB) PausedSince(ctx context.Context, id string) (time.Time, error) {
	v, err := r.StatusField(ctx, id, protocol.StatusFieldUpdatedAt)
	if err != nil {
		return time.Time{}, err
	}
	return protocol.ParseTime(v)
}

// names puts the protocol's names into a script's source: no field name
// or state is spelled by hand inside Lua.
var names = strings.NewReplacer(
	"$DATA", protocol.EntryField,
	"$RUN_STATUS", protocol.RunFieldStatus,
	"$RUN_ERROR", protocol.RunFieldError,
	"$RUN_FINISHED_AT", protocol.RunFieldFinishedAt,
	"$RUN_UPDATED_AT", protocol.RunFieldUpdatedAt,
	"$RUN_ATTEMPTS", protocol.RunFieldAttempts,
	"$COMPLETED", string(protocol.RunCompleted),
	"$FAILED", string(protocol.RunFailed),
	"$WORKER_STATE", protocol.StatusFieldState,
	"$CONTAINER", protocol.StatusFieldContainer,
	"$PAUSED", string(protocol.ContainerPaused),
	"$WORKER_REQUEST", protocol.StatusFieldRequestID,
	"$BUSY", string(protocol.WorkerBusy),
	"$STOPPING", string(protocol.WorkerStopping),
	"$STOPPED", string(protocol.WorkerStopped),
	"$SESSION_WORKER_EXPIRES_MS", protocol.SessionFieldWorkerExpiresMS,
	"$SESSION_WORKER_EXPIRES", protocol.SessionFieldWorkerExpires,
	"$SESSION_WORKER", protocol.SessionFieldWorkerID,
)

func script(src string) *redis.Script {
	src = strings.ReplaceAll(names.Replace(src), "$LESS\n", luaLess)
	return redis.NewScript(strings.ReplaceAll(src, "$DELIVERED\n", luaDelivered))
}

// luaDelivered is the Lua function delivered(key, group): the
// last-delivered-id of a consumer group of a stream, nil when the stream
// or the group does not exist ($DELIVERED in a script's source).
const luaDelivered = `local function delivered(key, group)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', key)
  if not ok then return nil end
  for _, g in ipairs(groups) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == group then return last end
  end
  return nil
end
`

// luaLess is the Lua function less(a, b) that orders two stream entry
// ids, for the scripts that compare them ($LESS in their source).
const luaLess = `local function less(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  if am ~= bm then return am < bm end
  return as < bs
end
`
