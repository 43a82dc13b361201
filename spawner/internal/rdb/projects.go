package rdb

import (
	"context"
	"strconv"

	"github.com/agentvisor/agentvisor/protocol"
)

// Projects is what the spawner writes of a project's own records: its
// budget (an operator's command) and, when a worker's session is reset,
// its session record and stored context.
type Projects interface {
	SetBudget(ctx context.Context, project string, limitUSD, warnUSD float64) error
	ForgetSession(ctx context.Context, agent protocol.AgentType, project string) error
}

// projectCmds implements Projects over the shared connection.
type projectCmds struct{ *core }

var _ Projects = (*projectCmds)(nil)

// SetBudget sets a project's budget; a limit of 0 removes it.
func (r *projectCmds) SetBudget(ctx context.Context, project string, limitUSD, warnUSD float64) error {
	key := r.Keys.ProjectBudget(project)
	if limitUSD == 0 {
		return r.c.Del(ctx, key).Err()
	}
	return r.c.HSet(ctx, key, protocol.BudgetFieldLimitUSD, strconv.FormatFloat(limitUSD, 'f', -1, 64),
		protocol.BudgetFieldWarnUSD, strconv.FormatFloat(warnUSD, 'f', -1, 64)).Err()
}

// ForgetSession removes a project's session record and stored context.
func (r *projectCmds) ForgetSession(ctx context.Context, agent protocol.AgentType, project string) error {
	return r.c.Del(ctx, r.Keys.Session(agent, project), r.Keys.ProjectContext(project)).Err()
}
