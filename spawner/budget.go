package spawner

import (
	"context"

	"github.com/agentvisor/agentvisor/protocol"
)

// SetBudget sets a project's budget (the set_budget command), which the
// wrappers read before each task of the project: a limit of 0 removes it.
func (s *Spawner) SetBudget(ctx context.Context, project string, b protocol.Budget) error {
	if err := s.rdb.SetBudget(ctx, project, b.LimitUSD, b.WarnUSD); err != nil {
		return redisError(err, "set the budget of project %s", project)
	}
	return nil
}
