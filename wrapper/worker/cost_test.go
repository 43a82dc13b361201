package worker

import (
	"context"
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// stubPrices prices the stub's custom Droid model (droidCustomModel) at
// Sonnet's rates: one answer of the stub's default usage (2000 input, 80
// output, 9000 cache reads, 100 cache writes) costs $0.010275.
const stubPrices = `{"agentvisor": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}`

const stubCallUSD = (2000*3 + 80*15 + 9000*0.3 + 100*3.75) / 1e6

func realDroidWithPrices(t *testing.T) (*env, *stubmodel.Server, []string) {
	t.Helper()
	e, stub, environ := realAgentEnv(t, protocol.AgentDroid)
	prices, err := protocol.ParseModelPrices(stubPrices)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Prices = prices
	return e, stub, environ
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Droid reports no cost: the wrapper prices what its proxy metered. The
// output carries the estimate (cost_estimated), the project's usage
// counter counts it, the task that crosses the warning threshold
// publishes budget_warning, and once the spending reached the limit a
// Droid task is refused BUDGET_EXCEEDED before any model call.
func TestDroidProjectBudgetFromEstimatedCost(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(map[bool]string{false: "per-task", true: "persistent"}[persistent], func(t *testing.T) {
			t.Parallel()
			e, stub, environ := realDroidWithPrices(t)
			e.cfg.Persistent = persistent
			e.start(environ...)
			ctx := context.Background()
			stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
			// Each task: one model call, $0.010275.
			if err := e.rc.HSet(ctx, e.keys.ProjectBudget("paid"), protocol.BudgetFieldLimitUSD, "0.02", protocol.BudgetFieldWarnUSD, "0.015").Err(); err != nil {
				t.Fatal(err)
			}
			warnings := func() []protocol.Lifecycle {
				var ws []protocol.Lifecycle
				for _, l := range e.lifecycleEvents() {
					if l.Event == protocol.EventBudgetWarning && l.Detail["project_id"] == "paid" {
						ws = append(ws, l)
					}
				}
				return ws
			}
			o1 := e.runTask(protocol.Task{RequestID: "d1", ProjectID: "paid", Prompt: "one"})
			if o1.Status != protocol.StatusComplete || !o1.CostEstimated || !near(o1.CostUSD, stubCallUSD) || len(warnings()) != 0 {
				t.Fatalf("first task: %+v, %d warnings", o1, len(warnings()))
			}
			if o1.Usage != (protocol.Usage{Input: 2000, Output: 80, CacheRead: 9000, CacheCreation: 100}) {
				t.Fatalf("first task's usage %+v: want the one call's", o1.Usage)
			}
			o2 := e.runTask(protocol.Task{RequestID: "d2", ProjectID: "paid", Prompt: "two"})
			if o2.Status != protocol.StatusComplete || !near(o2.CostUSD, stubCallUSD) {
				t.Fatalf("second task: %+v", o2)
			}
			testkit.Eventually(t, "one budget_warning (the second task crossed $0.015)", 5*time.Second, func() bool { return len(warnings()) == 1 })
			if w := warnings()[0]; w.RequestID != "d2" || !near(w.Detail["spent_usd"].(float64), 2*stubCallUSD) {
				t.Fatalf("budget_warning %+v", w)
			}
			spent, _ := e.rc.HGet(ctx, e.keys.UsageProject("paid"), protocol.UsageFieldCostUSD).Result()
			if f, _ := strconv.ParseFloat(spent, 64); !near(f, 2*stubCallUSD) {
				t.Fatalf("the project's usage counter says $%s, want the two estimates", spent)
			}
			calls := len(stub.Requests())
			o3 := e.runTask(protocol.Task{RequestID: "d3", ProjectID: "paid", Prompt: "three"})
			if o3.Status != protocol.StatusFailed || o3.Error.Code != protocol.CodeBudgetExceeded || o3.Error.Retryable ||
				!strings.Contains(o3.Error.Message, "of its $0.0200 budget") {
				t.Fatalf("over the limit: %+v (error %+v)", o3, o3.Error)
			}
			if len(stub.Requests()) != calls {
				t.Fatal("a Droid task over its project's budget reached the model")
			}
		})
	}
}

// A Droid task's max_budget_usd is guarded by the wrapper from what its
// proxy meters: the call whose tokens pass it stops the task at once,
// failed BUDGET_EXCEEDED (not retryable), although the agent was in the
// middle of a 30 s tool call and had more calls scripted; no further
// model call reaches the upstream. A persistent Droid is interrupted and
// serves the next task in the same process.
func TestDroidMaxBudgetStopsTheAgent(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(map[bool]string{false: "per-task", true: "persistent"}[persistent], func(t *testing.T) {
			t.Parallel()
			e, stub, environ := realDroidWithPrices(t)
			e.cfg.Persistent = persistent
			e.cfg.TaskTimeout = 120 * time.Second
			allowed, err := protocol.ParseAllowedCommandsEnv("worker.progress,sleep.*")
			if err != nil {
				t.Fatal(err)
			}
			e.cfg.AllowedCommands = allowed
			e.start(environ...)
			// Three calls at $0.0103 (the stub's default usage) stay under
			// $0.05; the fourth reports 20 000 input tokens ($0.06) more.
			big := stubmodel.Usage{InputTokens: 20_000, OutputTokens: 80}
			sleep := shellTool(protocol.AgentDroid, "sleep 30")
			progress := func(step string) stubmodel.Step {
				return stubmodel.Step{ToolUse: shellTool(protocol.AgentDroid, `worker-wrapper progress --step "`+step+`"`)}
			}
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
				progress("one"), progress("two"), progress("three"),
				{ToolUse: sleep, Usage: &big},
				progress("never"),
			}, Fallback: &stubmodel.Step{Text: finalText}})
			o := e.runTask(protocol.Task{RequestID: "m1", ProjectID: "p", Prompt: "spend", MaxBudgetUSD: 0.05})
			reqs := stub.Requests()
			if len(reqs) < 4 {
				t.Fatalf("%d model calls", len(reqs))
			}
			crossed := reqs[3].At
			took := o.Timestamp.Sub(crossed)
			t.Logf("persistent %v: budget passed at the 4th call's answer → output %v later; output cost $%.4f, usage %+v", persistent, took, o.CostUSD, o.Usage)
			if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeBudgetExceeded || o.Error.Retryable ||
				!strings.Contains(o.Error.Message, "passed its max_budget_usd (0.05)") {
				t.Fatalf("output %+v (error %+v)", o, o.Error)
			}
			if want := 3*stubCallUSD + (20_000*3+80*15)/1e6; !o.CostEstimated || !near(o.CostUSD, want) {
				t.Fatalf("output cost $%g (estimated %v), want $%g", o.CostUSD, o.CostEstimated, want)
			}
			if o.Usage.Input != 3*2000+20_000 {
				t.Fatalf("output usage %+v, want the four calls'", o.Usage)
			}
			if took > 10*time.Second {
				t.Fatalf("the task ended %v after its budget passed", took)
			}
			if n := len(stub.Requests()); n != 4 {
				t.Fatalf("%d model calls reached the stub, want 4: none after the budget passed", n)
			}
			pids := e.taskPIDs()
			agentPID := pids[len(pids)-1]
			if alive := syscall.Kill(agentPID, 0) == nil; alive != persistent {
				t.Fatalf("agent process %d alive after the budget stop: %v (persistent %v)", agentPID, alive, persistent)
			}
			// The next task, without a budget of its own, runs (in the same
			// process when persistent).
			stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
			o2 := e.runTask(protocol.Task{RequestID: "m2", ProjectID: "p", Prompt: "next"})
			if o2.Status != protocol.StatusComplete || !near(o2.CostUSD, stubCallUSD) {
				t.Fatalf("next task: %+v (error %+v)", o2, o2.Error)
			}
			if pids := e.taskPIDs(); persistent && pids[len(pids)-1] != agentPID {
				t.Fatalf("task pids %v: the persistent Droid was replaced", pids)
			}
		})
	}
}

// A model without a price: the task runs, its cost is unknown (0, not
// estimated), and a task with a max_budget_usd is told on its output
// stream that the budget is not enforced for that model.
func TestDroidUnpricedModel(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentDroid) // the defaults: no price for the stub's model
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
	o := e.runTask(protocol.Task{RequestID: "u1", Prompt: "hello", MaxBudgetUSD: 0.001})
	if o.Status != protocol.StatusComplete || o.CostUSD != 0 || o.CostEstimated || o.Usage.Input != 2000 {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	_, progress := e.docs(e.keys.Output(e.cfg.WorkerID))
	told := false
	for _, p := range progress {
		told = told || (p.Level == protocol.LevelWarning && strings.Contains(p.Step, `max_budget_usd is not enforced for the calls of model "agentvisor"`))
	}
	if !told {
		t.Fatalf("no warning said the budget is not enforced: %+v", progress)
	}
}
