package spawner

import (
	"context"
	"strconv"

	"github.com/agentvisor/agentvisor/protocol"
)

// SetBudget sets a project's budget (the set_budget command), which the
// wrappers read before each task of the project: a limit of 0 removes it.
// `workerctl budget` is left to workerctl's restructure (issue 15).
func (s *Spawner) SetBudget(ctx context.Context, project string, b protocol.Budget) error {
	key := s.rdb.Keys.ProjectBudget(project)
	var err error
	if b.LimitUSD == 0 {
		err = s.rdb.C.Del(ctx, key).Err()
	} else {
		err = s.rdb.C.HSet(ctx, key, protocol.BudgetFieldLimitUSD, strconv.FormatFloat(b.LimitUSD, 'f', -1, 64),
			protocol.BudgetFieldWarnUSD, strconv.FormatFloat(b.WarnUSD, 'f', -1, 64)).Err()
	}
	if err != nil {
		return redisError(err, "set the budget of project %s", project)
	}
	return nil
}
