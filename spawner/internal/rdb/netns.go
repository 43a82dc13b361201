package rdb

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// NetnsMarks says which network namespace holders are a live manager's
// spares, so that another manager's reconciler leaves them be.
type NetnsMarks interface {
	MarkSpareNetns(ctx context.Context, ids []string, ttl time.Duration) error
	SpareNetnsMarked(ctx context.Context, ids []string) (map[string]bool, error)
}

// netnsCmds implements NetnsMarks over the shared connection.
type netnsCmds struct{ *core }

var _ NetnsMarks = (*netnsCmds)(nil)

// MarkSpareNetns says, for ttl, that the holders ids are a live manager's
// spare network namespaces.
func (r *netnsCmds) MarkSpareNetns(ctx context.Context, ids []string, ttl time.Duration) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.Set(ctx, ctlplane.SpareNetnsKey(r.Keys, id), "1", ttl)
		}
		return nil
	})
	return err
}

// SpareNetnsMarked returns which of the holders ids are marked spare.
func (r *netnsCmds) SpareNetnsMarked(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	cmds := make([]*redis.IntCmd, len(ids))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Exists(ctx, ctlplane.SpareNetnsKey(r.Keys, id))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, c := range cmds {
		out[ids[i]] = c.Val() > 0
	}
	return out, nil
}
