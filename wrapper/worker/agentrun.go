package worker

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// agentRunner runs the agent: for a task (the execute step of task.go), in
// the persistent process or in a process of its own, with the further
// turns of its steering messages; and for the wrapper's own turns (a
// retiring session's summary). It owns the persistent process
// (persistent.go) and a cancelled task's wind-down (winddown.go); the task
// loop's goroutine runs it.
type agentRunner struct {
	agentRunnerParams
	wind windDown // a cancelled task's run still winding down
}

// agentRunnerParams are what the agent runner is built from: the
// adapter, the parts a run asks, the settings; and the persistent
// process, which it owns from then on.
type agentRunnerParams struct {
	agent   agent.Adapter
	starter agent.Starter
	sweeper Sweeper // nil: nothing swept
	// env is the agent's environment for a run whose progress token is
	// token (Config.AgentEnv, with the model API proxy and the progress
	// endpoint as Run started them).
	env       func(token string, task protocol.Task) []string
	persist   *persistentAgent // nil unless AGENT_PERSISTENT
	spend     *spending
	heal      *healer
	approvals *approvals
	pub       *publisher
	terminate *terminator
	usage     rdb.Usage
	log       *slog.Logger
	now       func() time.Time

	workerID     string
	workspace    string
	pty          bool
	taskTimeout  time.Duration
	resultGrace  time.Duration
	killGrace    time.Duration
	stallTimeout time.Duration
}

func newAgentRunner(p agentRunnerParams) *agentRunner { return &agentRunner{agentRunnerParams: p} }

// runTask runs the agent for the task cur in plan's session: its turn
// (cancellable: winddown.go), then the turns of the steering messages
// that came during it. It returns the outcome, its cost estimated where
// the agent reports none, and how to run the task again in another
// session (the session policy's rerun, when a resume failed).
func (w *agentRunner) runTask(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current) (agent.Outcome, func(Invocation) agent.Outcome) {
	spec := w.spec(task, invocationFor(w.agent, task, plan), cur)
	spec.Interrupt = cur.cancel.channel()
	spec.OnStart = func(pid int) {
		cur.mu.Lock()
		cur.agentPID = pid
		_ = cur.run.Transition(protocol.RunRunning, w.now())
		cur.mu.Unlock()
		w.pub.run(cur)
		w.pub.lifecycle(protocol.EventTaskStarted, task.RequestID, task.TaskID, map[string]any{"pid": pid, "attempt": cur.attempt})
	}
	agentCtx, cancel := w.terminate.context(ctx)
	outcome, winding := w.cancellable(agentCtx, task, plan, cur, spec)
	outcome = w.spend.withEstimate(cur, w.steerTurns(agentCtx, task, plan, cur, spec, w.agent.CheckOutcome(outcome)))
	if winding == nil {
		cancel()
	} else {
		go func() { <-winding; cancel() }() // the run goes on after the task's output (winddown.go)
	}
	return outcome, func(inv Invocation) agent.Outcome {
		spec.Argv, spec.Stdin = w.agent.Argv(inv), w.agent.Stdin(inv)
		w.converse(&spec, inv, cur)
		rerunCtx, cancel := w.terminate.context(ctx)
		defer cancel()
		defer w.sweep(task, time.Now(), "end")
		return w.spend.withEstimate(cur, agent.Run(rerunCtx, spec))
	}
}

// Sweeper kills every process a task started at or after since that is
// still alive, wherever in the process tree it went, sparing the
// processes the wrapper started itself and their groups (the reaper).
type Sweeper interface {
	Sweep(since time.Time) int
}

// sweep kills what the task's processes started since left running
// (why: "cancel", or "end" when its run ended, whatever the outcome).
func (w *agentRunner) sweep(task protocol.Task, since time.Time, why string) {
	if w.sweeper == nil {
		return
	}
	if n := w.sweeper.Sweep(since); n > 0 {
		w.log.Info("killed the processes the task left running", "request_id", task.RequestID, "processes", n, "at", why)
	}
}

// spec is how to run the agent for a task of the run cur.
func (w *agentRunner) spec(task protocol.Task, inv Invocation, cur *current) agent.Spec {
	inv.Dir = cur.workdir("")
	spec := agent.Spec{
		Argv: w.agent.Argv(inv), Stdin: w.agent.Stdin(inv), Env: w.env(cur.progressToken(), task),
		Dir: cur.workdir(w.workspace), Parser: w.agent.Parser(), PTY: w.pty, Timeout: task.Timeout(w.taskTimeout),
		ResultGrace: w.resultGrace, KillGrace: w.killGrace, Starter: w.starter, Check: w.agent.CheckInit,
		StallTimeout: w.stallTimeout, StallExempt: w.heal.parked,
		OnEvent: func(ev agent.Event) {
			if ev.Denied != nil {
				w.pub.denial(cur, ev.Denied)
			}
			if ev.Permission != nil {
				w.approvals.ask(cur, *ev.Permission)
			}
			if ev.Retry != nil {
				r := ev.Retry
				w.pub.progress(cur, fmt.Sprintf("model API retry %d/%d (HTTP %d, %s), next in %d ms", r.Attempt, r.MaxRetries, r.Status, r.Error, int(math.Round(r.DelayMS))), protocol.LevelWarning)
			}
			if ev.Progress != nil {
				w.pub.progress(cur, ev.Progress.Step, ev.Progress.Level)
			}
		},
	}
	w.converse(&spec, inv, cur)
	return spec
}

// converse makes spec run an agent that takes its prompt on a control
// channel (ACP) as a one-message persistent process for inv's session,
// whose permission requests the task's approvals answer.
func (w *agentRunner) converse(spec *agent.Spec, inv Invocation, cur *current) {
	if !w.agent.Caps().Converses {
		return
	}
	spec.Converse = func() (agent.Dialect, agent.Parser) { return w.agent.Input(inv) }
	spec.OnProcess = cur.steer.attach
}

// runAgent runs the task's agent: in the persistent process when there is
// one, in a process of its own otherwise.
func (w *agentRunner) run(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec) agent.Outcome {
	// A task with its own budget runs in a process of its own when the
	// budget is a flag of the process (Claude's --max-budget-usd); a
	// budget the wrapper guards (cost.go) lets the persistent process
	// serve it.
	defer cur.steer.detach()
	defer w.sweep(task, time.Now(), "end")
	// A task in a git worktree too: the persistent process runs in the
	// workspace.
	if !w.persist.usable() || (task.MaxBudgetUSD > 0 && w.agent.Caps().BudgetFlag) || cur.workdir("") != "" {
		return agent.Run(ctx, spec)
	}
	inv := invocationFor(w.agent, task, plan)
	return w.persist.run(ctx, persistentTask{prompt: inv.Prompt, plan: plan, inv: inv, spec: spec,
		env:      func(token string) []string { return w.env(token, task) },
		useToken: cur.setToken, onProc: cur.steer.attach})
}

// steerTurns runs the messages that came while the task's turn ran (and
// could not go into it) as further turns of its session, right after it,
// while the turns end well and no cancel came. The outcome is the last
// turn's, with the usage of all. Only for an agent that can resume a
// session here (Capabilities.NoResume).
func (w *agentRunner) steerTurns(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec, o agent.Outcome) agent.Outcome {
	if w.agent.Caps().NoResume != "" {
		return o
	}
	for {
		msgs := cur.steer.take()
		if len(msgs) == 0 || o.Result == nil || o.Result.IsError || o.Interrupted || o.Result.SessionID == "" || ctx.Err() != nil {
			return o
		}
		next := task
		next.Prompt = strings.Join(msgs, "\n\n")
		p := plan
		p.ResumeID = o.Result.SessionID
		inv := invocationFor(w.agent, next, p)
		s := spec
		s.Argv, s.Stdin, s.OnStart = w.agent.Argv(inv), w.agent.Stdin(inv), nil
		w.converse(&s, inv, cur)
		w.pub.progress(cur, "message: running it as the next turn of the task's session", "")
		o = mergeTurns(o, w.run(ctx, next, p, cur, s))
	}
}

// mergeTurns is the outcome of two turns of one task: the second's, with
// the usage, cost and time of both.
func mergeTurns(a, b agent.Outcome) agent.Outcome {
	b.Duration += a.Duration
	if b.Result == nil {
		b.EarlierTurns = b.EarlierTurns.Add(a.Result.Usage)
		return b
	}
	r := *b.Result
	r.Usage, r.CostUSD = r.Usage.Add(a.Result.Usage), r.CostUSD+a.Result.CostUSD
	b.Result = &r
	return b
}

// prewarm starts the persistent agent ahead of the first task (a warm
// pool worker): the process is up, waiting on its input, before a create
// takes the worker.
func (w *agentRunner) prewarm() {
	task := protocol.Task{RequestID: "prewarm"}
	cur := newCurrent(task, taskSource{}, protocol.NewRun(task.RequestID, "", w.workerID, task.Project(), w.now()))
	spec := w.spec(task, Invocation{}, cur)
	w.persist.prestart(spec, func(token string) []string { return w.env(token, task) })
}

// close waits for a wind-down in progress, then ends the persistent
// process, if any: the worker is stopping.
func (w *agentRunner) close() {
	w.wind.settle()
	w.persist.close()
}

// runOwnTurn runs a turn of the wrapper's own in the agent (a retiring
// session's summary): no output stream, no progress, no cost of the
// task's; its usage and cost go to the project's counters (countOwnTurn).
// With a persistent agent it runs there, in the session it resumes (a
// persistent Droid loads it from its files, where `droid exec` would ask
// its vendor's cloud). Terminate stops it.
func (w *agentRunner) ownTurn(ctx context.Context, task protocol.Task, inv Invocation, timeout time.Duration) agent.Outcome {
	cur := newCurrent(task, taskSource{}, protocol.NewRun(task.RequestID, "", w.workerID, task.Project(), w.now()))
	spec := w.spec(task, inv, cur)
	spec.Timeout = min(timeout, w.taskTimeout)
	o := w.ownRun(ctx, task, inv, cur, spec)
	w.countOwnTurn(ctx, task.Project(), inv.ResumeID, cur, o)
	return o
}

// ownRun runs spec (inv's) as a turn of the wrapper's own, its model calls
// metered to cur: in the persistent agent when there is one, in a process
// of its own otherwise.
func (w *agentRunner) ownRun(ctx context.Context, task protocol.Task, inv Invocation, cur *current, spec agent.Spec) agent.Outcome {
	w.wind.settle()
	defer w.spend.ownTurn(cur)()
	ctx, cancel := w.terminate.context(ctx)
	defer cancel()
	defer w.sweep(task, time.Now(), "end")
	if !w.persist.usable() {
		return agent.Run(ctx, spec)
	}
	plan := SessionPlan{ResumeID: inv.ResumeID}
	return w.persist.run(ctx, persistentTask{prompt: inv.Prompt, plan: plan, inv: inv, spec: spec,
		env: func(token string) []string { return w.env(token, task) }, useToken: cur.setToken})
}

// countOwnTurn adds what a turn of the wrapper's own used, as a task's
// output would report it (Droid's: the calls the proxy metered, at their
// estimated cost), to the usage counters of the project, the worker and
// the session it ran in. No task counts.
func (w *agentRunner) countOwnTurn(ctx context.Context, project, session string, cur *current, oc agent.Outcome) {
	if oc.StartErr != nil {
		return
	}
	var o protocol.Output
	o.Usage, o.CostUSD = taskUsage(oc)
	w.spend.estimateCost(&o, cur, oc)
	if o.Usage == (protocol.Usage{}) && o.CostUSD == 0 {
		return
	}
	u := rdb.TaskUsage{Project: project, Session: session, Worker: w.workerID, Usage: o.Usage, CostUSD: o.CostUSD}
	// The turn may have ended on Terminate: its usage is counted all the
	// same, within the publisher's bound.
	if err := w.countUsage(u, "", "own_turn"); err != nil {
		w.log.Warn("the usage of the wrapper's own turn is not counted", "project_id", project, "err", err)
	}
}

// countUsage adds the usage of model calls that belong to no task's
// output to the project's, the worker's and the session's counters, and
// says so on the lifecycle stream (EventUsage), where the manager's
// metrics count it as the counters and budgets do. why is what the calls
// were: own_turn (the wrapper's own turn, a retiring session's summary)
// or wind_down (a cancelled task's agent after its output).
func (w *agentRunner) countUsage(u rdb.TaskUsage, requestID, why string) error {
	if err := w.usage.AddUsage(w.pub.final, u); err != nil {
		return err
	}
	w.pub.lifecycle(protocol.EventUsage, requestID, "", map[string]any{"project_id": u.Project, "reason": why,
		"input": u.Usage.Input, "output": u.Usage.Output, "cache_read": u.Usage.CacheRead, "cache_creation": u.Usage.CacheCreation,
		"cost_usd": u.CostUSD})
	return nil
}
