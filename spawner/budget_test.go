package spawner

import (
	"context"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// set_budget writes the project's budget hash that the wrappers read; a
// limit of 0 removes it.
func TestSetBudgetCommand(t *testing.T) {
	f := newFixture(t, nil)
	c := f.startManager(t)
	ctx := context.Background()
	if _, err := c.Do(ctx, protocol.Command{Action: protocol.ActionSetBudget, ProjectID: "shop", Budget: &protocol.Budget{LimitUSD: 50, WarnUSD: 40}}); err != nil {
		t.Fatal(err)
	}
	h, _ := f.rc.HGetAll(ctx, f.keys.ProjectBudget("shop")).Result()
	if h[protocol.BudgetFieldLimitUSD] != "50" || h[protocol.BudgetFieldWarnUSD] != "40" {
		t.Fatalf("budget hash %v", h)
	}
	if _, err := c.Do(ctx, protocol.Command{Action: protocol.ActionSetBudget, ProjectID: "shop", Budget: &protocol.Budget{}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.rc.Exists(ctx, f.keys.ProjectBudget("shop")).Result(); n != 0 {
		t.Fatal("a limit of 0 left the budget")
	}
}
