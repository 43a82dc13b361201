package protocol

import "math"

// MaxBudgetUSD bounds a budget (a task's or a project's), in US dollars.
const MaxBudgetUSD = 1e6

// Budget is a project's spending budget, kept in the hash
// Keys.ProjectBudget and set with the set_budget command. The wrapper
// refuses a task of a project whose spending (its usage counter's cost_usd)
// reached LimitUSD, and publishes budget_warning when a task makes it
// cross WarnUSD.
type Budget struct {
	LimitUSD float64 `json:"limit_usd"`          // 0 removes the project's budget
	WarnUSD  float64 `json:"warn_usd,omitempty"` // 0: no warning
}

// Fields of the budget hash.
const (
	BudgetFieldLimitUSD = "limit_usd"
	BudgetFieldWarnUSD  = "warn_usd"
)

func (b Budget) validate(path string) error {
	if err := checkBudget(path+".limit_usd", b.LimitUSD); err != nil {
		return err
	}
	if err := checkBudget(path+".warn_usd", b.WarnUSD); err != nil {
		return err
	}
	if b.LimitUSD > 0 && b.WarnUSD > b.LimitUSD {
		return fieldErr(path+".warn_usd", "is %g, above the limit %g", b.WarnUSD, b.LimitUSD)
	}
	return nil
}

func checkBudget(field string, v float64) error {
	if math.IsNaN(v) || v < 0 || v > MaxBudgetUSD {
		return fieldErr(field, "is %g, want 0 to %g", v, float64(MaxBudgetUSD))
	}
	return nil
}
