package rdb

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// The managers' own records (worker:managers, worker:manager:{id}), the
// projects' budgets and the state the metrics collector reads.

// RenewManager writes a manager's state hash with its TTL and keeps its id
// in the managers set, in one transaction.
func (r *RDB) RenewManager(ctx context.Context, id string, fields map[string]any, ttl time.Duration) error {
	key := ctlplane.ManagerStateKey(r.Keys, id)
	_, err := r.C.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, key, fields)
		pipe.Expire(ctx, key, ttl)
		pipe.SAdd(ctx, ctlplane.ManagersKey(r.Keys), id)
		return nil
	})
	return err
}

// LeaveManager removes a manager's state and its id from the managers
// set, when the state is still this instance's (a manager restarted under
// the same id has written its own).
func (r *RDB) LeaveManager(ctx context.Context, id, instance string) error {
	key := ctlplane.ManagerStateKey(r.Keys, id)
	inst, err := r.C.HGet(ctx, key, ctlplane.ManagerFieldInstance).Result()
	if err != nil || inst != instance {
		return err
	}
	if err := r.C.Del(ctx, key).Err(); err != nil {
		return err
	}
	return r.C.SRem(ctx, ctlplane.ManagersKey(r.Keys), id).Err()
}

// ManagerStates returns the state hash of every manager in the managers
// set; ids whose state expired are dropped from the set.
func (r *RDB) ManagerStates(ctx context.Context) ([]map[string]string, error) {
	ids, err := r.C.SMembers(ctx, ctlplane.ManagersKey(r.Keys)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(ids))
	for _, id := range ids {
		h, err := r.C.HGetAll(ctx, ctlplane.ManagerStateKey(r.Keys, id)).Result()
		if err != nil {
			return nil, err
		}
		if len(h) == 0 {
			r.C.SRem(ctx, ctlplane.ManagersKey(r.Keys), id)
			continue
		}
		out = append(out, h)
	}
	return out, nil
}

// SetBudget sets a project's budget; a limit of 0 removes it.
func (r *RDB) SetBudget(ctx context.Context, project string, limitUSD, warnUSD float64) error {
	key := r.Keys.ProjectBudget(project)
	if limitUSD == 0 {
		return r.C.Del(ctx, key).Err()
	}
	return r.C.HSet(ctx, key, protocol.BudgetFieldLimitUSD, strconv.FormatFloat(limitUSD, 'f', -1, 64),
		protocol.BudgetFieldWarnUSD, strconv.FormatFloat(warnUSD, 'f', -1, 64)).Err()
}

// FleetState is what the metrics collector reads in one round trip: a few
// status fields of each worker, the creation queue's length, the creates
// in flight and the workers being retired.
type FleetState struct {
	Workers                   [][]string // per worker: the fields asked for, "" when missing
	Queue, Creating, Retiring int64
}

// ReadFleetState reads FleetState for ids, with fields of each status hash.
func (r *RDB) ReadFleetState(ctx context.Context, ids, fields []string) (FleetState, error) {
	pipe := r.C.Pipeline()
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

// QueuedCreates returns up to n creates waiting for a slot, oldest first.
func (r *RDB) QueuedCreates(ctx context.Context, n int64) ([]string, error) {
	return r.C.LRange(ctx, ctlplane.CreationQueueKey(r.Keys), 0, n-1).Result()
}
