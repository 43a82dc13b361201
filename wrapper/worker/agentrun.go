package worker

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// How a task's agent runs (the execute step of task.go): its spec, in the
// persistent process or in a process of its own, the further turns of its
// steering messages; and the wrapper's own turns.

// agentSpec is how to run the agent for a task of the run cur.
func (w *Worker) agentSpec(task protocol.Task, inv Invocation, cur *current) agent.Spec {
	spec := agent.Spec{
		Argv: w.agent.Argv(inv), Stdin: w.agent.Stdin(inv), Env: w.agentEnv(cur.progressToken(), task),
		Dir: w.cfg.Workspace, Parser: w.agent.Parser(), PTY: w.cfg.PTY, Timeout: task.Timeout(w.cfg.TaskTimeout),
		ResultGrace: w.cfg.ResultGrace, KillGrace: w.cfg.KillGrace, Starter: w.starter, Check: w.agent.CheckInit,
		StallTimeout: w.cfg.StallTimeout, StallExempt: w.heal.parked,
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
func (w *Worker) converse(spec *agent.Spec, inv Invocation, cur *current) {
	if !w.agent.Caps().Converses {
		return
	}
	spec.Converse = func() (agent.Dialect, agent.Parser) { return w.agent.Input(inv.ResumeID) }
	spec.OnProcess = cur.steer.attach
}

// agentEnv is the agent's environment for a run whose progress token is
// token.
func (w *Worker) agentEnv(token string, task protocol.Task) []string {
	return w.cfg.AgentEnv(w.agent, w.environ, w.ProgressURL(), token, task)
}

// runAgent runs the task's agent: in the persistent process when there is
// one, in a process of its own otherwise.
func (w *Worker) runAgent(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec) agent.Outcome {
	// A task with its own budget runs in a process of its own when the
	// budget is a flag of the process (Claude's --max-budget-usd); a
	// budget the wrapper guards (cost.go) lets the persistent process
	// serve it.
	defer cur.steer.detach()
	if !w.persist.usable() || (task.MaxBudgetUSD > 0 && w.agent.Caps().BudgetFlag) {
		return agent.Run(ctx, spec)
	}
	inv := invocationFor(w.agent, task, plan)
	return w.persist.run(ctx, persistentTask{prompt: inv.Prompt, plan: plan, inv: inv, spec: spec,
		env:      func(token string) []string { return w.agentEnv(token, task) },
		useToken: cur.setToken, onProc: cur.steer.attach})
}

// steerTurns runs the messages that came while the task's turn ran (and
// could not go into it) as further turns of its session, right after it,
// while the turns end well and no cancel came. The outcome is the last
// turn's, with the usage of all. Only for an agent that can resume a
// session here (Capabilities.NoResume).
func (w *Worker) steerTurns(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec, o agent.Outcome) agent.Outcome {
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
		o = mergeTurns(o, w.runAgent(ctx, next, p, cur, s))
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
func (w *Worker) prewarm() {
	task := protocol.Task{RequestID: "prewarm"}
	cur := newCurrent(task, taskSource{}, protocol.NewRun(task.RequestID, "", w.cfg.WorkerID, task.Project(), w.now()))
	spec := w.agentSpec(task, Invocation{}, cur)
	w.persist.prestart(spec, func(token string) []string { return w.agentEnv(token, task) })
}

// runOwnTurn runs a turn of the wrapper's own in the agent (a retiring
// session's summary): no output stream, no progress, no cost of the
// task's; its usage and cost go to the project's counters (countOwnTurn).
// With a persistent agent it runs there, in the session it resumes (a
// persistent Droid loads it from its files, where `droid exec` would ask
// its vendor's cloud). Terminate stops it.
func (w *Worker) runOwnTurn(ctx context.Context, task protocol.Task, inv Invocation, timeout time.Duration) agent.Outcome {
	cur := newCurrent(task, taskSource{}, protocol.NewRun(task.RequestID, "", w.cfg.WorkerID, task.Project(), w.now()))
	spec := w.agentSpec(task, inv, cur)
	spec.Timeout = min(timeout, w.cfg.TaskTimeout)
	o := w.ownRun(ctx, task, inv, cur, spec)
	w.countOwnTurn(ctx, task.Project(), inv.ResumeID, cur, o)
	return o
}

// ownRun runs spec (inv's) as a turn of the wrapper's own, its model calls
// metered to cur: in the persistent agent when there is one, in a process
// of its own otherwise.
func (w *Worker) ownRun(ctx context.Context, task protocol.Task, inv Invocation, cur *current, spec agent.Spec) agent.Outcome {
	w.wind.settle()
	defer w.spend.ownTurn(cur)()
	ctx, cancel := w.terminate.context(ctx)
	defer cancel()
	if !w.persist.usable() {
		return agent.Run(ctx, spec)
	}
	plan := SessionPlan{ResumeID: inv.ResumeID}
	return w.persist.run(ctx, persistentTask{prompt: inv.Prompt, plan: plan, inv: inv, spec: spec,
		env: func(token string) []string { return w.agentEnv(token, task) }, useToken: cur.setToken})
}

// countOwnTurn adds what a turn of the wrapper's own used, as a task's
// output would report it (Droid's: the calls the proxy metered, at their
// estimated cost), to the usage counters of the project, the worker and
// the session it ran in. No task counts.
func (w *Worker) countOwnTurn(ctx context.Context, project, session string, cur *current, oc agent.Outcome) {
	if oc.StartErr != nil {
		return
	}
	var o protocol.Output
	o.Usage, o.CostUSD = taskUsage(oc)
	w.spend.estimateCost(&o, cur, oc)
	if o.Usage == (protocol.Usage{}) && o.CostUSD == 0 {
		return
	}
	u := rdb.TaskUsage{Project: project, Session: session, Worker: w.cfg.WorkerID, Usage: o.Usage, CostUSD: o.CostUSD}
	if err := w.rdb.AddUsage(context.WithoutCancel(ctx), u); err != nil {
		w.log.Warn("the usage of the wrapper's own turn is not counted", "project_id", project, "err", err)
	}
}
