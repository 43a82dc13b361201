package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

// budgetRow is a project's budget and what it has spent (its usage
// counter's cost, which the wrappers compare with the limit before each
// task).
type budgetRow struct {
	ProjectID string  `json:"project_id"`
	LimitUSD  float64 `json:"limit_usd"` // 0: no budget
	WarnUSD   float64 `json:"warn_usd"`  // 0: no warning
	SpentUSD  float64 `json:"spent_usd"`
}

// State is what the wrappers make of the row: exceeded (the project's
// tasks are refused BUDGET_EXCEEDED), warning (past the threshold), ok,
// or none (no budget).
func (r budgetRow) State() string {
	switch {
	case r.LimitUSD <= 0:
		return "none"
	case r.SpentUSD >= r.LimitUSD:
		return "exceeded"
	case r.WarnUSD > 0 && r.SpentUSD >= r.WarnUSD:
		return "warning"
	}
	return "ok"
}

func budgetCmd(c *ctl) *cobra.Command {
	var limit, warn float64
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "budget [PROJECT]",
		Short: "Show a project's budget and spending; with --limit, set it",
		Long: `budget shows each project's budget: its limit, its warning threshold and
what it has spent (in US dollars, from its usage counter). Without
PROJECT it lists every project with a budget.

With --limit it sets PROJECT's budget through a worker-manager (the
set_budget command): a task of a project that has spent its limit is
refused BUDGET_EXCEEDED before any model call, and the task that makes
its spending cross --warn publishes a budget_warning lifecycle event.
--limit 0 removes the budget.`,
		Example: `  workerctl budget
  workerctl budget shop --limit 20 --warn 15
  workerctl budget shop --limit 0`,
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) > 1 || (len(a) == 0 && cmd.Flags().Changed("limit")) {
				return fail(exitUsage, "budget: want [PROJECT], and PROJECT with --limit (see workerctl budget --help)")
			}
			if cmd.Flags().Changed("warn") && !cmd.Flags().Changed("limit") {
				return fail(exitUsage, "budget: --warn goes with --limit")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			if cmd.Flags().Changed("limit") {
				set := protocol.Command{Action: protocol.ActionSetBudget, ProjectID: a[0], Budget: &protocol.Budget{LimitUSD: limit, WarnUSD: warn}}
				check := set
				check.ID = "workerctl-check" // Client.Do gives the command its id
				if err := check.Validate(); err != nil {
					return fail(exitUsage, "budget: %v", err)
				}
				if _, err := c.do(ctx, set, timeout); err != nil {
					return err
				}
			}
			projects := a
			if len(projects) == 0 {
				var err error
				if projects, err = c.budgetProjects(ctx); err != nil {
					return err
				}
			}
			rows := make([]budgetRow, 0, len(projects))
			for _, p := range projects {
				r, err := c.readBudget(ctx, p)
				if err != nil {
					return err
				}
				rows = append(rows, r)
			}
			if c.json {
				return printJSON(c.out, rows)
			}
			return renderBudgets(c.out, rows)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&limit, "limit", 0, "set the project's limit in US dollars (0 removes its budget)")
	f.Float64Var(&warn, "warn", 0, "with --limit: the spending in US dollars past which a budget_warning is published (0: none)")
	f.DurationVar(&timeout, "timeout", time.Minute, "with --limit: how long to wait for the manager's reply")
	return cmd
}

// budgetProjects lists the projects that have a budget, sorted.
func (c *ctl) budgetProjects(ctx context.Context) ([]string, error) {
	return c.fleet().BudgetProjects(ctx)
}

// readBudget reads a project's budget and spending.
func (c *ctl) readBudget(ctx context.Context, project string) (budgetRow, error) {
	b, err := c.fleet().Budget(ctx, project)
	return budgetRow(b), err
}
