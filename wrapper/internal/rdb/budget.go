package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Budgets is what a task's admission reads of its project's budget.
type Budgets interface {
	Spend(ctx context.Context, project string) (ProjectSpend, error)
}

// budgetCmds implements Budgets over the shared connection.
type budgetCmds struct{ *core }

var _ Budgets = (*budgetCmds)(nil)

// ProjectSpend is a project's budget and what it has spent.
type ProjectSpend struct {
	Budget   protocol.Budget // zero when the project has none
	SpentUSD float64         // the usage counter's cost_usd
}

// Spend reads a project's budget and spending, in one round trip.
func (r *budgetCmds) Spend(ctx context.Context, project string) (ProjectSpend, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	pipe := r.c.Pipeline()
	b := pipe.HMGet(ctx, r.Keys.ProjectBudget(project), protocol.BudgetFieldLimitUSD, protocol.BudgetFieldWarnUSD)
	spent := pipe.HGet(ctx, r.Keys.UsageProject(project), protocol.UsageFieldCostUSD)
	_, _ = pipe.Exec(ctx)
	if err := b.Err(); err != nil {
		return ProjectSpend{}, fmt.Errorf("rdb: budget of %s: %w", project, err)
	}
	vals := b.Val()
	if len(vals) != 2 { // a pipeline a failover cut short may leave its reply empty
		return ProjectSpend{}, fmt.Errorf("rdb: budget of %s: %d fields in the reply, want 2", project, len(vals))
	}
	num := func(v any) float64 { s, _ := v.(string); f, _ := strconv.ParseFloat(s, 64); return f }
	var s ProjectSpend
	s.Budget.LimitUSD, s.Budget.WarnUSD = num(vals[0]), num(vals[1])
	v, err := spent.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return ProjectSpend{}, fmt.Errorf("rdb: spending of %s: %w", project, err)
	}
	s.SpentUSD, _ = strconv.ParseFloat(v, 64)
	return s, nil
}
