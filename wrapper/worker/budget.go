package worker

import (
	"context"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Budgets: a task's max_budget_usd is Claude's --max-budget-usd (a
// result error_max_budget_usd fails the task BUDGET_EXCEEDED); a project's
// budget (set_budget) is checked before each task of the project, from the
// project's usage counter, which the wrapper increments with every task's
// output.

// checkBudget reads the task's project budget and spending: a project
// whose spending reached its limit refuses the task BUDGET_EXCEEDED before
// any model call. Redis unreachable or refusing: the task runs (the budget
// is a guard on spending, not on the worker's availability), and the
// warning is logged.
func (ts *tasks) checkBudget(ctx context.Context, task protocol.Task) (rdb.ProjectSpend, *protocol.Error) {
	s, err := ts.rdb.Spend(ctx, task.Project())
	if err != nil {
		ts.log.Warn("project budget not read: the task runs unchecked", "project_id", task.Project(), "err", err)
		return rdb.ProjectSpend{}, nil
	}
	if s.Budget.LimitUSD > 0 && s.SpentUSD >= s.Budget.LimitUSD {
		return s, protocol.NewError(protocol.CodeBudgetExceeded, "project %s has spent $%.4f of its $%.4f budget", task.Project(), s.SpentUSD, s.Budget.LimitUSD)
	}
	return s, nil
}

// budgetWarning publishes budget_warning when the task's cost made its
// project's spending cross the budget's warning threshold.
func (ts *tasks) budgetWarning(task protocol.Task, before rdb.ProjectSpend, cost float64) {
	warn := before.Budget.WarnUSD
	if warn <= 0 || before.SpentUSD >= warn || before.SpentUSD+cost < warn {
		return
	}
	ts.pub.lifecycle(protocol.EventBudgetWarning, task.RequestID, task.TaskID, map[string]any{
		"project_id": task.Project(), "spent_usd": before.SpentUSD + cost, "warn_usd": warn, "limit_usd": before.Budget.LimitUSD})
}
