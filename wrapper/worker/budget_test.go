package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// A project's budget, with the real claude: the task that crosses the
// warning threshold publishes budget_warning; once the spending reached
// the limit, a task is refused BUDGET_EXCEEDED before any model call. A
// task's own max_budget_usd is Claude's --max-budget-usd: spent, the task
// fails BUDGET_EXCEEDED.
func TestBudgets(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
	// Every task here costs about $0.017 (the stub's usage).
	if err := e.rc.HSet(context.Background(), e.keys.ProjectBudget("paid"), protocol.BudgetFieldLimitUSD, "0.03", protocol.BudgetFieldWarnUSD, "0.02").Err(); err != nil {
		t.Fatal(err)
	}
	warnings := func() int {
		n := 0
		for _, l := range e.lifecycleEvents() {
			if l.Event == protocol.EventBudgetWarning && l.Detail["project_id"] == "paid" {
				n++
			}
		}
		return n
	}
	o1 := e.runTask(protocol.Task{RequestID: "b1", ProjectID: "paid", Prompt: "one"})
	if o1.Status != protocol.StatusComplete || o1.CostUSD <= 0 || warnings() != 0 {
		t.Fatalf("first task: %+v, %d warnings", o1, warnings())
	}
	o2 := e.runTask(protocol.Task{RequestID: "b2", ProjectID: "paid", Prompt: "two"})
	if o2.Status != protocol.StatusComplete {
		t.Fatalf("second task: %+v", o2)
	}
	testkit.Eventually(t, "one budget_warning (the second task crossed $0.02)", 5*time.Second, func() bool { return warnings() == 1 })
	calls := len(stub.Requests())
	o3 := e.runTask(protocol.Task{RequestID: "b3", ProjectID: "paid", Prompt: "three"})
	if o3.Status != protocol.StatusFailed || o3.Error.Code != protocol.CodeBudgetExceeded || o3.Error.Retryable || !strings.Contains(o3.Error.Message, "of its $0.0300 budget") {
		t.Fatalf("over the limit: %+v (error %+v)", o3, o3.Error)
	}
	if len(stub.Requests()) != calls {
		t.Fatal("a task over its project's budget reached the model")
	}

	// The task's own budget: two tool calls at $0.017 each, $0.01 allowed.
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(protocol.AgentClaude, `worker-wrapper progress --step "one"`)},
		{ToolUse: shellTool(protocol.AgentClaude, `worker-wrapper progress --step "two"`)},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	o4 := e.runTask(protocol.Task{RequestID: "b4", ProjectID: "free", Prompt: "spend", MaxBudgetUSD: 0.01})
	if o4.Status != protocol.StatusFailed || o4.Error.Code != protocol.CodeBudgetExceeded {
		t.Fatalf("max_budget_usd: %+v (error %+v)", o4, o4.Error)
	}
}
