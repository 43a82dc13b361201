package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// persistentAgent is the one agent process a long-lived worker keeps
// across its tasks (AGENT_PERSISTENT): a follow-up in the same session
// needs no new process and no resume. A process that dies is replaced
// (resuming the session); after two deaths the worker runs one process per
// task. A process serves one session: a task of another session starts
// another (Droid would carry the first session's turns into a second one
// opened in the same process). The task loop's goroutine owns it and all
// its fields.
type persistentAgent struct {
	log  *slog.Logger
	argv func(Invocation) []string // the persistent command line of an invocation
	// input is the dialect and parser of a process for a session to
	// resume ("": a new one); opens: a process is opened (its session,
	// for Droid) before its first message.
	input func(inv agent.Invocation) (agent.Dialect, agent.Parser)
	opens bool

	proc    *agent.Persistent // nil when none runs
	session string            // the session proc holds
	token   string            // the progress token in proc's environment
	deaths  int
	off     bool // it died too often: one process per task from now on
	fresh   bool // proc was started ahead (prewarm) for a new session and has run nothing yet
	tasks   int  // tasks proc served

	recycleTasks int   // recycle proc after this many tasks (0: never)
	recycleRSS   int64 // recycle proc once its group's RSS passed this (bytes; 0: never)
}

// prestart starts the process ahead of any task, for a new session with
// no system prompt extra: the first task that wants exactly that takes it
// up (see send); any other starts its own.
func (p *persistentAgent) prestart(spec agent.Spec, env func(token string) []string) {
	if !p.usable() || p.proc != nil {
		return
	}
	token := newToken()
	spec.Argv = p.argv(Invocation{})
	spec.Env = env(token)
	spec.Dialect, spec.Parser = p.input(agent.Invocation{})
	proc, err := agent.StartPersistent(spec)
	if err != nil {
		p.log.Warn("persistent agent not started ahead", "err", err)
		return
	}
	p.proc, p.token, p.session, p.fresh = proc, token, "", true
	// Frozen before it has loaded, it would load after the unpause: wait
	// for its answer to the opening request first (Claude's initialize,
	// Droid's new session).
	if err := proc.Open(openTimeout); err != nil {
		p.log.Warn("persistent agent started ahead did not initialize", "err", err)
		if p.opens { // Droid takes no message before its session is open
			proc.Close()
			p.proc = nil
			return
		}
	}
	p.log.Info("persistent agent started ahead of the first task", "pid", proc.Pid())
}

// openTimeout bounds the wait for a new process's answer to its opening
// request (Droid 0.225.2 opens a session in 0.6 to 2 s here).
const openTimeout = 60 * time.Second

// persistentTask is one task for the persistent agent.
type persistentTask struct {
	prompt   string // as the agent gets it (Droid's new session: with the project's context)
	plan     SessionPlan
	inv      Invocation // how a new process starts for this task
	spec     agent.Spec // the task's one-process spec: timeout, events, the fallback
	env      func(token string) []string
	useToken func(token string)      // the progress token the task's reports must carry
	onProc   func(*agent.Persistent) // the process the task's message goes to, before it is sent
}

// usable reports whether tasks go to the persistent agent.
func (p *persistentAgent) usable() bool { return p != nil && !p.off }

// run runs a task in the persistent process, starting one (for the plan's
// session) when none serves that session.
func (p *persistentAgent) run(ctx context.Context, t persistentTask) agent.Outcome {
	o, reused := p.send(ctx, t)
	notRun := o.Events == 0 || (o.Result != nil && o.Result.IsError && o.Result.Turns == 0)
	if reused && notRun && !o.TimedOut && !o.Cancelled && !o.Interrupted && p.proc == nil {
		// The process had died before it took up the message (between
		// tasks; a part of it that outlived the rest answers with an error
		// of no turns): the message was not run, so run it in a new process.
		p.log.Warn("the persistent agent had died: starting another for this task")
		o, _ = p.send(ctx, t)
	}
	return o
}

func (p *persistentAgent) send(ctx context.Context, t persistentTask) (agent.Outcome, bool) {
	prestarted := p.proc != nil && p.fresh && p.proc.Alive() && t.plan.ResumeID == "" && t.inv.Extra == ""
	if p.proc != nil && !prestarted && (!p.proc.Alive() || t.plan.ResumeID == "" || t.plan.ResumeID != p.session) {
		p.proc.Close()
		p.proc = nil
	}
	p.fresh = false
	reused := false
	if p.proc == nil {
		token := newToken()
		pspec := t.spec
		pspec.Argv = p.argv(t.inv)
		pspec.Env = t.env(token)
		pspec.Dialect, pspec.Parser = p.input(agent.Invocation{ResumeID: t.plan.ResumeID})
		proc, err := agent.StartPersistent(pspec)
		if err != nil {
			p.log.Warn("persistent agent did not start: one process for this task", "err", err)
			return agent.Run(ctx, t.spec), false
		}
		if p.opens {
			if o, ok := p.open(ctx, proc, t); !ok {
				return o, false
			}
		}
		p.proc, p.token, p.session, p.tasks = proc, token, t.plan.ResumeID, 0
		p.log.Info("persistent agent started", "pid", proc.Pid(), "resume", t.plan.ResumeID)
	} else {
		reused = true
		if t.spec.OnStart != nil {
			t.spec.OnStart(p.proc.Pid())
		}
	}
	t.useToken(p.token)
	if t.onProc != nil {
		t.onProc(p.proc)
	}
	o := p.proc.SendInterruptible(ctx, p.proc.Message(t.prompt), t.spec.Timeout, t.spec.Interrupt, t.spec.OnEvent)
	if o.Result != nil && o.Result.SessionID != "" {
		p.session = o.Result.SessionID
	}
	p.tasks++
	if !p.proc.Alive() {
		p.proc.Close()
		p.proc = nil
		if o.Result == nil && !o.TimedOut && !o.Cancelled && !o.Interrupted && !o.Stalled && o.Aborted == nil { // an abort stopped it
			p.deaths++
			if p.deaths >= 2 {
				p.off = true
				p.log.Warn("the persistent agent died twice: one process per task from now on")
			}
		}
	}
	p.recycle()
	return o, reused
}

// open opens a new process's session (Droid). A session to resume that
// the agent does not have gives the outcome of a resume that failed
// before the agent did anything (the session policy then runs the task
// again in a new session); any other failure runs the task in a process
// of its own and counts as a death of the persistent process.
func (p *persistentAgent) open(ctx context.Context, proc *agent.Persistent, t persistentTask) (agent.Outcome, bool) {
	err := proc.Open(min(openTimeout, max(t.spec.Timeout, time.Second)))
	if err == nil {
		return agent.Outcome{}, true
	}
	proc.Close()
	if errors.Is(err, agent.ErrSessionNotFound) {
		p.log.Warn("persistent agent: the session to resume is not there", "session_id", t.plan.ResumeID, "err", err)
		return agent.Outcome{Result: &agent.Result{IsError: true, Subtype: "error", Text: err.Error()}}, false
	}
	p.deaths++
	if p.deaths >= 2 {
		p.off = true
	}
	p.log.Warn("persistent agent did not open its session: one process for this task", "err", err, "deaths", p.deaths)
	return agent.Run(ctx, t.spec), false
}

// pid is the running process's pid (0 when none).
func (p *persistentAgent) pid() int {
	if p == nil || p.proc == nil {
		return 0
	}
	return p.proc.Pid()
}

// close ends the process, if any.
func (p *persistentAgent) close() {
	if p != nil && p.proc != nil {
		p.proc.Close()
		p.proc = nil
	}
}
