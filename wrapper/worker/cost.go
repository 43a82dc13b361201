package worker

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/apiproxy"
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
//
// Which agent reports no cost is its adapter's to say
// (Capabilities.ReportsCost).

// spending meters the model calls of the task in flight for an agent
// that reports no cost, and guards its max_budget_usd.
type spending struct {
	state  *workerState
	agent  agent.Adapter
	prices protocol.ModelPrices
	pub    *publisher
	log    *slog.Logger
	// direct says which service the agent talks to by itself, whose calls
	// no proxy of ours meters ("" when the proxy meters them).
	direct func() string

	mu sync.Mutex // guards the fields below
	// own is the wrapper's own agent run in progress (a retiring
	// session's summary), nil when none: its model calls are its own,
	// not the task's.
	own *current
	// winding is a cancelled task whose agent winds down after its
	// output (winddown.go), nil when none: its calls are still that
	// task's, and allowed.
	winding  *current
	unpriced map[string]bool // the models logged as having no price
}

// taskSpend is what a task spent on model calls, as the proxy metered it.
type taskSpend struct {
	mu       sync.Mutex // guards the fields below
	usage    protocol.Usage
	costUSD  float64
	metered  bool // the proxy saw answers of the task
	priced   bool // some of them had a price
	over     bool // past max_budget_usd: further model calls are refused
	unpriced bool // a model without a price was seen (the task was told)
	// last is the input side of the last model call metered (its
	// answer's first report with input figures): the session's context.
	last protocol.Usage
	// wholeTask: the output of the attempt just made carries the meter's
	// figures of the whole task (every attempt), not the agent's own.
	wholeTask bool
}

// ownTurn meters the model calls to cur, a turn of the wrapper's own,
// until the function it returns is called.
func (s *spending) ownTurn(cur *current) func() {
	s.mu.Lock()
	before := s.own
	s.own = cur
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.own = before
		s.mu.Unlock()
	}
}

// task is the run whose model calls count: the wrapper's own turn while
// one runs (it has no max_budget_usd), else the task in flight.
func (s *spending) task() *current {
	s.mu.Lock()
	own, winding := s.own, s.winding
	s.mu.Unlock()
	if own != nil {
		return own
	}
	if cur := s.state.current(); cur != nil {
		return cur
	}
	return winding
}

// windingDown counts the model calls of a cancelled task's agent that
// goes on after its output as that task's, until the function it
// returns is called.
func (s *spending) windingDown(cur *current) func() {
	s.mu.Lock()
	s.winding = cur
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.winding == cur {
			s.winding = nil
		}
		s.mu.Unlock()
	}
}

// meter is the proxy's meter hook: it adds an answer's tokens to the task
// in flight, priced, and stops the task once its estimated cost passed
// its max_budget_usd.
func (s *spending) meter(model string, delta protocol.Usage) {
	if model == "" {
		model = s.agent.Model(nil)
	}
	cost, priced := s.prices.Cost(model, delta)
	cur := s.task()
	if cur == nil {
		return
	}
	sp := cur.spend
	sp.mu.Lock()
	sp.usage, sp.costUSD, sp.metered, sp.priced = sp.usage.Add(delta), sp.costUSD+cost, true, sp.priced || priced
	if delta.Context() > 0 {
		sp.last = protocol.Usage{Input: delta.Input, CacheRead: delta.CacheRead, CacheCreation: delta.CacheCreation}
	}
	limit, spent := cur.task.MaxBudgetUSD, sp.costUSD
	stopped := false
	if limit > 0 && spent > limit && !sp.over {
		sp.over = true
		stopped = cur.cancel.abortWith(protocol.NewError(protocol.CodeBudgetExceeded,
			"the task's estimated cost $%.4f passed its max_budget_usd (%g) on model %s; the agent was stopped", spent, limit, model))
	}
	tell := !priced && !sp.unpriced && !s.agent.Caps().ReportsCost // an agent's own figure is priced by it
	sp.unpriced = sp.unpriced || !priced
	sp.mu.Unlock()
	if tell {
		s.unpricedModel(cur, model)
	}
	if stopped {
		s.log.Warn("max_budget_usd passed: stopping the task", "request_id", cur.task.RequestID,
			"cost_usd", spent, "max_budget_usd", limit, "model", model)
	}
}

// unpricedModel says, once per model in the worker's log and once per
// task on its output stream when it has a max_budget_usd, that a model
// has no price: its calls cost nothing in the estimate.
func (s *spending) unpricedModel(cur *current, model string) {
	s.mu.Lock()
	first := !s.unpriced[model]
	if s.unpriced == nil {
		s.unpriced = map[string]bool{}
	}
	s.unpriced[model] = true
	s.mu.Unlock()
	if first {
		s.log.Warn("model has no price in MODEL_PRICES: its calls' cost is unknown, counted as 0", "model", model,
			"priced_models", strings.Join(s.prices.Models(), ","))
	}
	if cur.task.MaxBudgetUSD > 0 {
		s.pub.progress(cur, fmt.Sprintf("max_budget_usd is not enforced for the calls of model %q: it has no price in MODEL_PRICES", model),
			protocol.LevelWarning)
	}
}

// refuse is the proxy's gate. A model call outside any run (no task in
// flight, no turn of the wrapper's own, no cancelled task winding down)
// is nobody's to count: refused. A task past its max_budget_usd makes no
// more model calls while its agent is being stopped.
func (s *spending) refuse() (code, msg string) {
	cur := s.task()
	if cur == nil {
		return protocol.RefusedModelNoTask, "no task is in flight on this worker: a model call is a task's, metered and budgeted as its own"
	}
	cur.spend.mu.Lock()
	defer cur.spend.mu.Unlock()
	if !cur.spend.over {
		return "", ""
	}
	return protocol.RefusedModelOverBudget, fmt.Sprintf("the task's max_budget_usd (%g) is spent", cur.task.MaxBudgetUSD)
}

// refused is the proxy's report of a request it refused: a warning of
// the task in flight (none outside a task: the proxy's log has it).
func (s *spending) refused(r apiproxy.Refusal) {
	if cur := s.task(); cur != nil {
		s.pub.refusal(cur, protocol.RefusedToolModel, r.Request, r.Code+": "+r.Reason, r.Code)
	}
}

// unenforced warns on the task's output stream, at its start, when its
// max_budget_usd cannot be guarded: an agent that reports no cost and
// talks to its vendor by itself has no proxy of ours to meter its calls.
func (s *spending) unenforced(cur *current) {
	if cur.task.MaxBudgetUSD <= 0 || s.agent.Caps().ReportsCost {
		return
	}
	if direct := s.direct(); direct != "" {
		s.pub.progress(cur, "max_budget_usd is not enforced: "+direct+", whose calls no proxy meters", protocol.LevelWarning)
	}
}

// estimate is the wrapper's cost of the task cur, for an agent that
// reports none: what the proxy metered for the task so far, with that
// usage (every model call that went through it: Droid's own figure
// leaves out the call in flight when its turn is interrupted); else (no
// proxy) the agent's reported usage priced by the model of its init line.
func (s *spending) estimate(cur *current, oc agent.Outcome) (cost float64, usage *protocol.Usage, estimated bool) {
	sp := cur.spend
	sp.mu.Lock()
	metered, costUSD, metUsage, priced := sp.metered, sp.costUSD, sp.usage, sp.priced
	sp.mu.Unlock()
	if metered {
		return costUSD, &metUsage, priced
	}
	if oc.Result == nil {
		return 0, nil, false
	}
	cost, estimated = s.prices.Cost(s.agent.Model(oc.Init), oc.Result.Usage)
	return cost, nil, estimated
}

// withEstimate puts the estimate in a run's result, as the cost the
// agent would have reported: the session record counts it. An agent that
// reports no call's usage (Droid, Codex) gets the last metered call as
// its last turn: the session's context, where its summed usage would only
// bound it (Codex's sums the whole thread in a resumed session).
func (s *spending) withEstimate(cur *current, oc agent.Outcome) agent.Outcome {
	if s.agent.Caps().ReportsCost || oc.Result == nil {
		return oc
	}
	if oc.LastTurn == nil {
		cur.spend.mu.Lock()
		last := cur.spend.last
		cur.spend.mu.Unlock()
		if last.Context() > 0 {
			oc.LastTurn = &agent.Turn{MessageID: "metered", Usage: last}
		}
	}
	r := *oc.Result
	r.CostUSD, _, _ = s.estimate(cur, oc)
	oc.Result = &r
	return oc
}

// estimateCost puts the estimate in a task's output, flagged: its cost,
// and the metered usage. For an agent that reports its own cost, the
// meter still sees every model call of the container, the agent's own
// and those it did not make itself (a script, a curl from its shell tool
// with its API key, which is the proxy's token): when the meter counted
// more tokens than the agent reported, the output carries the meter's
// figures, and the higher of the two costs.
func (s *spending) estimateCost(o *protocol.Output, cur *current, oc agent.Outcome) {
	sp := cur.spend
	sp.mu.Lock()
	sp.wholeTask = false
	sp.mu.Unlock()
	if s.agent.Caps().ReportsCost {
		sp.mu.Lock()
		metered, mUsage, mCost, priced := sp.metered, sp.usage, sp.costUSD, sp.priced
		sp.mu.Unlock()
		if !metered || mUsage.Total() <= o.Usage.Total() {
			return
		}
		s.log.Warn("the model calls of the task's container used more than the agent reported: the output counts the proxy's meter",
			"request_id", cur.task.RequestID, "reported_tokens", o.Usage.Total(), "metered_tokens", mUsage.Total())
		o.Usage = mUsage
		if priced && mCost > o.CostUSD {
			o.CostUSD, o.CostEstimated = mCost, true
		}
		sp.mu.Lock()
		sp.wholeTask = true
		sp.mu.Unlock()
		return
	}
	cost, usage, estimated := s.estimate(cur, oc)
	if usage != nil {
		o.Usage = *usage
	}
	o.CostUSD, o.CostEstimated = cost, estimated
}
