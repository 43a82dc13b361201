package rdb

import (
	"context"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// Managers is the managers' own records (worker:managers,
// worker:manager:{id}): each renews its state hash under a TTL, and any
// reader lists them.
type Managers interface {
	RenewManager(ctx context.Context, id string, fields map[string]any, ttl time.Duration) error
	LeaveManager(ctx context.Context, id, instance string) error
	ManagerStates(ctx context.Context) ([]map[string]string, error)
	ListManagers(ctx context.Context) ([]ctlplane.ManagerState, error)
}

// managerCmds implements Managers over the shared connection.
type managerCmds struct{ *core }

var _ Managers = (*managerCmds)(nil)

// RenewManager writes a manager's state hash with its TTL and keeps its id
// in the managers set, in one transaction.
func (r *managerCmds) RenewManager(ctx context.Context, id string, fields map[string]any, ttl time.Duration) error {
	key := ctlplane.ManagerStateKey(r.Keys, id)
	_, err := r.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
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
func (r *managerCmds) LeaveManager(ctx context.Context, id, instance string) error {
	key := ctlplane.ManagerStateKey(r.Keys, id)
	inst, err := r.c.HGet(ctx, key, ctlplane.ManagerFieldInstance).Result()
	if err != nil || inst != instance {
		return err
	}
	if err := r.c.Del(ctx, key).Err(); err != nil {
		return err
	}
	return r.c.SRem(ctx, ctlplane.ManagersKey(r.Keys), id).Err()
}

// ManagerStates returns the state hash of every manager in the managers
// set; ids whose state expired are dropped from the set.
func (r *managerCmds) ManagerStates(ctx context.Context) ([]map[string]string, error) {
	ids, err := r.c.SMembers(ctx, ctlplane.ManagersKey(r.Keys)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(ids))
	for _, id := range ids {
		h, err := r.c.HGetAll(ctx, ctlplane.ManagerStateKey(r.Keys, id)).Result()
		if err != nil {
			return nil, err
		}
		if len(h) == 0 {
			r.c.SRem(ctx, ctlplane.ManagersKey(r.Keys), id)
			continue
		}
		out = append(out, h)
	}
	return out, nil
}

// ListManagers reads the state of every manager of the key prefix, sorted by
// id (ManagerStates, parsed).
func (r *managerCmds) ListManagers(ctx context.Context) ([]ctlplane.ManagerState, error) {
	states, err := r.ManagerStates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ctlplane.ManagerState, 0, len(states))
	for _, h := range states {
		out = append(out, ctlplane.ParseManagerState(h))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
