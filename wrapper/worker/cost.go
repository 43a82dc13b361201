package worker

import (
	"fmt"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// Cost for an agent that reports none (Droid 0.225.2 gives tokens, never
// dollars). The model API proxy meters every answer of the task's model
// calls (apiproxy.UsageFunc); the wrapper prices each call's tokens by
// the model its answer names (Config.Prices: MODEL_PRICES over the
// defaults), and the sum is the task's cost_usd, flagged cost_estimated,
// which the usage counters and so the project's budget count. The same
// sum, as it grows, guards the task's max_budget_usd: once past it the
// task is stopped as AUTH_FAILED stops it (the persistent Droid gets an
// interrupt and lives on) and fails BUDGET_EXCEEDED, and the proxy
// refuses the agent's further model calls. Claude keeps its own figure
// and its native --max-budget-usd.

// spend is what the task in flight spent on model calls, as the proxy
// metered it; guarded by Worker.mu.
type spend struct {
	usage    protocol.Usage
	costUSD  float64
	metered  bool // the proxy saw answers of the task
	priced   bool // some of them had a price
	over     bool // past max_budget_usd: further model calls are refused
	unpriced bool // a model without a price was seen (the task was told)
}

// onModelUsage is the proxy's meter hook: it adds an answer's tokens to
// the task in flight, priced, and stops the task once its estimated cost
// passed its max_budget_usd. The wrapper's own turns (a retiring
// session's summary) are not the task's and are not counted.
func (w *Worker) onModelUsage(model string, delta protocol.Usage) {
	if model == "" {
		model = w.agent.Model(nil)
	}
	cost, priced := w.cfg.Prices.Cost(model, delta)
	w.mu.Lock()
	cur := w.cur
	if cur == nil || w.ownTurns > 0 {
		w.mu.Unlock()
		return
	}
	s := &cur.spend
	s.usage, s.costUSD, s.metered, s.priced = s.usage.Add(delta), s.costUSD+cost, true, s.priced || priced
	limit, spent := cur.task.MaxBudgetUSD, s.costUSD
	stopped := false
	if limit > 0 && spent > limit && !s.over {
		s.over = true
		stopped = cur.cancel.abortLocked(protocol.NewError(protocol.CodeBudgetExceeded,
			"the task's estimated cost $%.4f passed its max_budget_usd (%g) on model %s; the agent was stopped", spent, limit, model))
	}
	tell := !priced && !s.unpriced
	s.unpriced = s.unpriced || !priced
	w.mu.Unlock()
	if tell {
		w.unpricedModel(cur, model)
	}
	if stopped {
		w.log.Warn("max_budget_usd passed: stopping the task", "request_id", cur.task.RequestID,
			"cost_usd", spent, "max_budget_usd", limit, "model", model)
	}
}

// unpricedModel says, once per model in the worker's log and once per
// task on its output stream when it has a max_budget_usd, that a model
// has no price: its calls cost nothing in the estimate.
func (w *Worker) unpricedModel(cur *current, model string) {
	w.mu.Lock()
	first := !w.unpriced[model]
	if w.unpriced == nil {
		w.unpriced = map[string]bool{}
	}
	w.unpriced[model] = true
	w.mu.Unlock()
	if first {
		w.log.Warn("model has no price in MODEL_PRICES: its calls' cost is unknown, counted as 0", "model", model,
			"priced_models", strings.Join(w.cfg.Prices.Models(), ","))
	}
	if cur.task.MaxBudgetUSD > 0 {
		w.pushProgress(cur, fmt.Sprintf("max_budget_usd is not enforced for the calls of model %q: it has no price in MODEL_PRICES", model),
			nil, "", protocol.LevelWarning)
	}
}

// refuseModelCall is the proxy's gate: a task past its max_budget_usd
// makes no more model calls while its agent is being stopped.
func (w *Worker) refuseModelCall() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil || !w.cur.spend.over || w.ownTurns > 0 {
		return ""
	}
	return fmt.Sprintf("the task's max_budget_usd (%g) is spent", w.cur.task.MaxBudgetUSD)
}

// budgetUnenforced warns on the task's output stream, at its start, when
// its max_budget_usd cannot be guarded: an agent that reports no cost and
// talks to its vendor by itself has no proxy of ours to meter its calls.
func (w *Worker) budgetUnenforced(cur *current) {
	if cur.task.MaxBudgetUSD > 0 && !w.agent.Caps().ReportsCost && w.cfg.model.url == "" {
		w.pushProgress(cur, "max_budget_usd is not enforced: "+w.agent.Route(w.getenv).Direct+", whose calls no proxy meters",
			nil, "", protocol.LevelWarning)
	}
}

// estimate is the wrapper's cost of the task cur, for an agent that
// reports none: what the proxy metered for the task so far, with that
// usage (every model call that went through it: Droid's own figure
// leaves out the call in flight when its turn is interrupted); else (no
// proxy) the agent's reported usage priced by the model of its init line.
func (w *Worker) estimate(cur *current, oc agent.Outcome) (cost float64, usage *protocol.Usage, estimated bool) {
	w.mu.Lock()
	s := cur.spend
	w.mu.Unlock()
	if s.metered {
		return s.costUSD, &s.usage, s.priced
	}
	if oc.Result == nil {
		return 0, nil, false
	}
	cost, estimated = w.cfg.Prices.Cost(w.agent.Model(oc.Init), oc.Result.Usage)
	return cost, nil, estimated
}

// withEstimate puts the estimate in a run's result, as the cost the
// agent would have reported: the session record counts it.
func (w *Worker) withEstimate(cur *current, oc agent.Outcome) agent.Outcome {
	if w.agent.Caps().ReportsCost || oc.Result == nil {
		return oc
	}
	r := *oc.Result
	r.CostUSD, _, _ = w.estimate(cur, oc)
	oc.Result = &r
	return oc
}

// estimateCost puts the estimate in a task's output, flagged: its cost,
// and the metered usage.
func (w *Worker) estimateCost(o *protocol.Output, cur *current, oc agent.Outcome) {
	if w.agent.Caps().ReportsCost {
		return
	}
	cost, usage, estimated := w.estimate(cur, oc)
	if usage != nil {
		o.Usage = *usage
	}
	o.CostUSD, o.CostEstimated = cost, estimated
}
