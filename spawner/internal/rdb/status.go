package rdb

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// WorkerStatus is a worker's status hash (Keys.Status), its history and
// heartbeat, and each host's paused set that the hash keeps in step.
type WorkerStatus interface {
	WriteStatus(ctx context.Context, id, host string, now time.Time, fields map[string]any) error
	Started(ctx context.Context, id, host string, now time.Time, fields map[string]any, l protocol.Lifecycle) (map[string]string, error)
	Paused(ctx context.Context, host string) ([]string, error)
	SyncPaused(ctx context.Context, host string, ids []string) error
	Status(ctx context.Context, id string) (map[string]string, error)
	StatusField(ctx context.Context, id, field string) (string, error)
	StatusValues(ctx context.Context, id string, fields ...string) ([]string, error)
	LookupStatus(ctx context.Context, id string, fields ...string) ([]string, bool, error)
	StatusFields(ctx context.Context, ids, fields []string, heartbeats bool) ([]map[string]string, [][]byte, error)
	PausedSince(ctx context.Context, id string) (time.Time, error)
	ReadFleetState(ctx context.Context, ids, fields []string) (FleetState, error)
	PushHistory(ctx context.Context, id string, rec protocol.TransitionRecord) error
	Heartbeat(ctx context.Context, id string) ([]byte, error)
	HasHeartbeat(ctx context.Context, id string) (bool, error)
}

// statusCmds implements WorkerStatus over the shared connection.
type statusCmds struct{ *core }

var _ WorkerStatus = (*statusCmds)(nil)

// WriteStatus sets fields of a worker's status hash (updated_at included).
// A write of the container's state keeps host's paused set
// (Keys.HostPaused) in step, in the same transaction: the set holds the
// workers of the host whose hash says paused. host is the worker's.
func (r *statusCmds) WriteStatus(ctx context.Context, id, host string, now time.Time, fields map[string]any) error {
	if _, ok := fields[protocol.StatusFieldContainer]; !ok {
		fields[protocol.StatusFieldUpdatedAt] = protocol.FormatTime(now)
		return r.c.HSet(ctx, r.Keys.Status(id), fields).Err()
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r.queueStatus(ctx, p, id, host, now, fields)
		return nil
	})
	return err
}

// queueStatus queues WriteStatus's commands on a transaction.
func (r *statusCmds) queueStatus(ctx context.Context, p redis.Pipeliner, id, host string, now time.Time, fields map[string]any) {
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
func (r *statusCmds) Started(ctx context.Context, id, host string, now time.Time, fields map[string]any, l protocol.Lifecycle) (map[string]string, error) {
	doc, err := l.Encode()
	if err != nil {
		return nil, err
	}
	var h *redis.MapStringStringCmd
	_, err = r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
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
func (r *statusCmds) Paused(ctx context.Context, host string) ([]string, error) {
	return r.c.SMembers(ctx, ctlplane.HostPausedKey(r.Keys, host)).Result()
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
func (r *statusCmds) SyncPaused(ctx context.Context, host string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	keys := []string{ctlplane.HostPausedKey(r.Keys, host), r.Keys.Workers()}
	args := make([]any, len(ids))
	for i, id := range ids {
		keys = append(keys, r.Keys.Status(id))
		args[i] = id
	}
	return syncPausedScript.Run(ctx, r.c, keys, args...).Err()
}

// Status returns a worker's status hash (empty when none).
func (r *statusCmds) Status(ctx context.Context, id string) (map[string]string, error) {
	return r.c.HGetAll(ctx, r.Keys.Status(id)).Result()
}

// StatusField returns one field of a worker's status hash ("" when none).
func (r *statusCmds) StatusField(ctx context.Context, id, field string) (string, error) {
	v, err := r.c.HGet(ctx, r.Keys.Status(id), field).Result()
	if Nil(err) {
		return "", nil
	}
	return v, err
}

// StatusValues returns fields of a worker's status hash, in order ("" for
// a field it lacks).
func (r *statusCmds) StatusValues(ctx context.Context, id string, fields ...string) ([]string, error) {
	vals, err := r.c.HMGet(ctx, r.Keys.Status(id), fields...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i], _ = v.(string)
	}
	return out, nil
}

// LookupStatus is StatusValues, and whether the hash holds any of the
// fields (false: no such worker, or none of them written yet).
func (r *statusCmds) LookupStatus(ctx context.Context, id string, fields ...string) ([]string, bool, error) {
	vals, err := r.c.HMGet(ctx, r.Keys.Status(id), fields...).Result()
	if err != nil {
		return nil, false, err
	}
	out := make([]string, len(vals))
	found := false
	for i, v := range vals {
		out[i], _ = v.(string)
		found = found || v != nil
	}
	return out, found, nil
}

// PushHistory pushes a transition on a worker's history, kept to its
// protocol.MaxStatusHistory newest entries.
func (r *statusCmds) PushHistory(ctx context.Context, id string, rec protocol.TransitionRecord) error {
	doc, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	key := r.Keys.StatusHistory(id)
	_, err = r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, doc)
		p.LTrim(ctx, key, 0, protocol.MaxStatusHistory-1)
		return nil
	})
	return err
}

// Heartbeat returns a worker's heartbeat document (nil when expired).
func (r *statusCmds) Heartbeat(ctx context.Context, id string) ([]byte, error) {
	b, err := r.c.Get(ctx, r.Keys.Heartbeat(id)).Bytes()
	if Nil(err) {
		return nil, nil
	}
	return b, err
}

// HasHeartbeat reports whether a worker's heartbeat is live (its key
// has not expired).
func (r *statusCmds) HasHeartbeat(ctx context.Context, id string) (bool, error) {
	n, err := r.c.Exists(ctx, r.Keys.Heartbeat(id)).Result()
	return n == 1, err
}

// StatusFields returns, for each of ids, the given fields of its status
// hash ("" for a missing one) and, with heartbeats, its heartbeat document
// (nil when expired), in one round trip: what the host leader's loops
// read of every worker each tick, without the spec and instructions that
// a whole hash carries.
func (r *statusCmds) StatusFields(ctx context.Context, ids, fields []string, heartbeats bool) ([]map[string]string, [][]byte, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	pipe := r.c.Pipeline()
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

// PausedSince returns when a worker's status hash last changed, the time
// its pause was recorded for a paused worker.
func (r *statusCmds) PausedSince(ctx context.Context, id string) (time.Time, error) {
	v, err := r.StatusField(ctx, id, protocol.StatusFieldUpdatedAt)
	if err != nil {
		return time.Time{}, err
	}
	return protocol.ParseTime(v)
}

// FleetState is what the metrics collector reads in one round trip: a few
// status fields of each worker, the creation queue's length, the creates
// in flight and the workers being retired.
type FleetState struct {
	Workers                   [][]string // per worker: the fields asked for, "" when missing
	Queue, Creating, Retiring int64
}

// ReadFleetState reads FleetState for ids, with fields of each status hash.
func (r *statusCmds) ReadFleetState(ctx context.Context, ids, fields []string) (FleetState, error) {
	pipe := r.c.Pipeline()
	hashes := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		hashes[i] = pipe.HMGet(ctx, r.Keys.Status(id), fields...)
	}
	queue := pipe.LLen(ctx, ctlplane.CreationQueueKey(r.Keys))
	creating := pipe.ZCard(ctx, ctlplane.CreatingKey(r.Keys))
	retiring := pipe.ZCard(ctx, ctlplane.RetiringKey(r.Keys))
	if _, err := pipe.Exec(ctx); err != nil && !Nil(err) {
		return FleetState{}, err
	}
	st := FleetState{Workers: make([][]string, len(ids)), Queue: queue.Val(), Creating: creating.Val(), Retiring: retiring.Val()}
	for i, h := range hashes {
		row := make([]string, len(fields))
		for j, v := range h.Val() {
			row[j], _ = v.(string)
		}
		st.Workers[i] = row
	}
	return st, nil
}
