package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// taskSource is where a task came from and where its output goes.
type taskSource struct {
	stream, group, entryID string // its input entry
	output                 string // its output stream; "" for a run of the wrapper's own
}

// current is the task in flight.
type current struct {
	task     protocol.Task
	run      *protocol.Run
	attempt  int
	token    string
	src      taskSource
	agentPID int
	cancel   interruptible // guarded by Worker.mu
	deadline time.Time     // when the task's timeout ends
	// parkedUntil is when the model call the proxy parked (rate limit)
	// goes out again; guarded by Worker.mu.
	parkedUntil time.Time
	steer       steering // guarded by Worker.mu
	spend       spend    // what its model calls cost, as the proxy metered them; guarded by Worker.mu (cost.go)
}

// runFields returns the fields of the run hash; the caller holds w.mu.
func (c *current) runFields() map[string]any {
	f := c.run.Hash()
	f[protocol.RunFieldAttempt] = c.attempt
	return f
}

// handle runs one task entry to its output.
func (w *Worker) handle(ctx context.Context, stream, group string, e *rdb.Entry) {
	src := taskSource{stream: stream, group: group, entryID: e.ID, output: w.cfg.Keys.OutputFor(w.cfg.Kind, w.cfg.WorkerID)}
	data, err := protocol.EntryData(e.Values)
	var task protocol.Task
	if err == nil {
		switch _, typ, _ := protocol.PeekType(data); typ {
		case protocol.TypeCancel:
			w.handleCancelEntry(src, e, data)
			return
		case protocol.TypeMessage:
			w.handleMessageEntry(src, e, data)
			return
		case protocol.TypePermissionReply:
			w.handlePermissionReplyEntry(src, e, data)
			return
		}
		task, err = protocol.DecodeTask(data)
	}
	if err != nil {
		w.reject(src, data, err)
		return
	}
	log := w.log.With("request_id", task.RequestID, "task_id", task.TaskID, "project_id", task.Project())
	// Once read, a task's own Redis work outlives shutdown: a task that
	// ends in the grace keeps its output, usage and session record.
	taskCtx := context.WithoutCancel(ctx)

	// A task whose run is already terminal was answered before (the
	// wrapper died between storing the output and acknowledging, or the
	// producer sent a request id twice): acknowledge, publish nothing, and
	// ask to be paused again, as after any task.
	rec, err := store(w.pub, "read run "+task.RequestID, func(c context.Context) (rdb.RunRecord, error) {
		return w.rdb.RunRecord(c, task.RequestID)
	})
	if err != nil {
		o := w.unrunOutput(task, protocol.NewError(protocol.CodeInternalError, "redis refused to read the run: %v", err))
		w.storeOutput(log, src, o, nil, nil)
		w.pub.lifecycle(protocol.EventTaskFailed, task.RequestID, task.TaskID, map[string]any{"code": protocol.CodeInternalError})
		w.requestPause(task.RequestID, task.TaskID, "stop_output:"+string(o.Status))
		return
	}
	if rec.State.Terminal() {
		log.Info("task already finished, acknowledging it again", "run_status", rec.State)
		_, _ = store(w.pub, "ack "+e.ID, func(c context.Context) (struct{}, error) { return struct{}{}, w.rdb.Ack(c, stream, group, e.ID) })
		w.requestPause(task.RequestID, task.TaskID, "duplicate_task:"+string(rec.State))
		return
	}
	// Every delivery counts: of this entry (a redelivery after a restart
	// or a lost reply), and the entries the spawner requeued before it.
	deliveries, _ := w.rdb.DeliveryCount(taskCtx, stream, group, e.ID)
	attempt := int(rec.Requeues + max(deliveries, 1))
	var (
		answered  rdb.AnsweredRun
		answerErr *protocol.Error
	)
	if task.Answers != "" {
		task, answered, answerErr = w.answeredRun(taskCtx, task)
		log = log.With("project_id", task.Project(), "answers", task.Answers)
	}

	now := w.now()
	cur := &current{task: task, run: protocol.NewRun(task.RequestID, task.TaskID, w.cfg.WorkerID, task.Project(), now),
		attempt: attempt, token: newToken(), src: src, cancel: newInterruptible(), deadline: now.Add(task.Timeout(w.cfg.TaskTimeout))}
	if !w.startTask(cur) {
		log.Info("shutdown began: the task stays pending")
		return
	}
	w.lookAhead(taskCtx, log, stream, e.ID)
	w.pushRun(cur)
	w.mu.Lock()
	_ = cur.run.Transition(protocol.RunQueued, now)
	w.mu.Unlock()
	w.pushRun(cur)
	w.pushStatus(map[string]any{protocol.StatusFieldRequestID: task.RequestID, protocol.StatusFieldTaskID: task.TaskID,
		protocol.StatusFieldOutputStream: src.output, protocol.StatusFieldTaskStarted: protocol.FormatTime(now),
		protocol.StatusFieldAttempt: attempt})

	if answerErr != nil {
		o := w.unrunOutput(task, answerErr)
		o.Answers, o.Attempt = task.Answers, attempt
		w.finish(log, cur, o, nil)
		return
	}
	budget, budgetErr := w.checkBudget(taskCtx, task)
	if budgetErr != nil {
		o := w.unrunOutput(task, budgetErr)
		o.ProjectID, o.Answers, o.Attempt = task.Project(), task.Answers, attempt
		w.finish(log, cur, o, nil)
		return
	}
	if cancelled, reason := w.cancelled(cur); cancelled {
		o := w.cancelledOutput(w.unrunOutput(task, nil), reason, false)
		o.ProjectID, o.Attempt = task.Project(), attempt
		w.finish(log, cur, o, nil)
		return
	}
	w.budgetUnenforced(cur)
	plan := w.sessions.Decide(taskCtx, task)
	if task.Answers != "" {
		plan = answerPlan(plan, answered)
	}
	spec := w.agentSpec(task, invocationFor(w.agent, task, plan), cur)
	spec.Interrupt = cur.cancel.interrupt
	spec.OnStart = func(pid int) {
		w.mu.Lock()
		cur.agentPID = pid
		_ = cur.run.Transition(protocol.RunRunning, w.now())
		w.mu.Unlock()
		w.pushRun(cur)
		w.pub.lifecycle(protocol.EventTaskStarted, task.RequestID, task.TaskID, map[string]any{"pid": pid, "attempt": attempt})
	}
	log.Info("task started", "resume", plan.ResumeID != "", "session_reason", plan.Decision.Reason, "attempt", attempt)

	oomBefore := oomKills()
	agentCtx, cancel := w.terminable(taskCtx)
	outcome := w.agent.CheckOutcome(w.runAgent(agentCtx, task, plan, cur, spec))
	outcome = w.withEstimate(cur, w.steerTurns(agentCtx, task, plan, cur, spec, outcome))
	cancel()
	outcome, plan = w.sessions.Complete(taskCtx, task, plan, outcome, func(inv Invocation) agent.Outcome {
		spec.Argv, spec.Stdin = w.agent.Argv(inv), w.agent.Stdin(inv)
		rerunCtx, cancel := w.terminable(taskCtx)
		defer cancel()
		return w.withEstimate(cur, agent.Run(rerunCtx, spec))
	})
	verdict := agent.Judge(outcome, w.cfg.JSONSchema)
	// A crash while the OOM killer fired in this container is an OOM: the
	// container lives on (its PID 1 is the wrapper), so only the cgroup's
	// counter tells.
	if verdict.Error != nil && verdict.Error.Code == protocol.CodeAgentCrashed && oomBefore >= 0 && oomKills() > oomBefore {
		verdict.Error = protocol.NewError(protocol.CodeOOMKilled, "the OOM killer ended the agent (%s); raise the worker's memory limit", outcome.Exit)
	}
	o := w.output(task, outcome, verdict, plan, attempt)
	w.estimateCost(&o, cur, outcome)
	o.Answers = task.Answers
	if r := outcome.Result; r != nil && r.Subtype == "error_max_budget_usd" && o.Error != nil {
		o.Error = protocol.NewError(protocol.CodeBudgetExceeded, "the task spent its max_budget_usd (%g): %s", task.MaxBudgetUSD, o.Error.Message)
	}
	if outcome.Interrupted {
		if abort := w.aborted(cur); abort != nil {
			o.Status, o.Result, o.Question, o.Error = protocol.StatusFailed, nil, "", abort
		} else {
			_, reason := w.cancelled(cur)
			o = w.cancelledOutput(o, reason, true)
		}
	}
	var usage *rdb.TaskUsage
	if outcome.StartErr == nil { // the agent ran: its task counts, once, with its output's usage
		usage = &rdb.TaskUsage{Project: task.Project(), Session: o.SessionID, Worker: w.cfg.WorkerID, Usage: o.Usage, CostUSD: o.CostUSD}
	}
	w.finish(log, cur, o, usage)
	w.budgetWarning(task, budget, o.CostUSD)
}

// startTask makes cur the task in flight and the worker busy, unless
// shutdown began (then it returns false).
func (w *Worker) startTask(cur *current) bool {
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return false
	}
	w.cur = cur
	w.takeCancelLocked(cur)
	w.takeMessagesLocked(cur)
	_, err := w.machine.Transition(protocol.WorkerBusy, "task "+cur.task.RequestID, w.now())
	w.mu.Unlock()
	if err != nil {
		w.log.Error("worker state", "err", err)
	}
	return true
}

// cancelled reports whether a cancel named cur, and its reason.
func (w *Worker) cancelled(cur *current) (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return cur.cancel.cancelled, cur.cancel.reason
}

// runAgent runs the task's agent: in the persistent process when there is
// one, in a process of its own otherwise.
func (w *Worker) runAgent(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec) agent.Outcome {
	// A task with its own budget runs in a process of its own when the
	// budget is a flag of the process (Claude's --max-budget-usd); a
	// budget the wrapper guards (cost.go) lets the persistent process
	// serve it.
	if !w.persist.usable() || (task.MaxBudgetUSD > 0 && w.agent.Caps().BudgetFlag) {
		return agent.Run(ctx, spec)
	}
	env := func(token string) []string { return w.cfg.AgentEnv(w.agent, w.environ, w.ProgressURL(), token, task) }
	useToken := func(token string) {
		w.mu.Lock()
		cur.token = token
		w.mu.Unlock()
	}
	onProc := func(proc *agent.Persistent) {
		w.mu.Lock()
		cur.steer.inject, cur.steer.answer = proc.Inject, proc.AnswerPermission
		w.mu.Unlock()
	}
	defer func() {
		w.mu.Lock()
		cur.steer.inject, cur.steer.answer = nil, nil
		w.mu.Unlock()
	}()
	inv := invocationFor(w.agent, task, plan)
	return w.persist.run(ctx, persistentTask{prompt: inv.Prompt, plan: plan, inv: inv,
		spec: spec, env: env, useToken: useToken, onProc: onProc})
}

// prewarm starts the persistent agent ahead of the first task (a warm
// pool worker): the process is up, waiting on its input, before a create
// takes the worker.
func (w *Worker) prewarm() {
	task := protocol.Task{RequestID: "prewarm"}
	cur := &current{task: task, run: protocol.NewRun(task.RequestID, "", w.cfg.WorkerID, task.Project(), w.now())}
	spec := w.agentSpec(task, Invocation{}, cur)
	w.persist.prestart(spec, func(token string) []string { return w.cfg.AgentEnv(w.agent, w.environ, w.ProgressURL(), token, task) })
}

// runOwnTurn runs a turn of the wrapper's own in the agent (a retiring
// session's summary): no output stream, no progress; Terminate stops it.
func (w *Worker) runOwnTurn(ctx context.Context, task protocol.Task, inv Invocation, timeout time.Duration) agent.Outcome {
	cur := &current{task: task, run: protocol.NewRun(task.RequestID, "", w.cfg.WorkerID, task.Project(), w.now())}
	spec := w.agentSpec(task, inv, cur)
	spec.Timeout = min(timeout, w.cfg.TaskTimeout)
	w.mu.Lock()
	w.ownTurns++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.ownTurns--
		w.mu.Unlock()
	}()
	ctx, cancel := w.terminable(ctx)
	defer cancel()
	return agent.Run(ctx, spec)
}

// agentSpec is how to run the agent for a task of the run cur.
func (w *Worker) agentSpec(task protocol.Task, inv Invocation, cur *current) agent.Spec {
	return agent.Spec{
		Argv: w.agent.Argv(inv), Stdin: w.agent.Stdin(inv), Env: w.cfg.AgentEnv(w.agent, w.environ, w.ProgressURL(), cur.token, task),
		Dir: w.cfg.Workspace, Parser: w.agent.Parser(), PTY: w.cfg.PTY, Timeout: task.Timeout(w.cfg.TaskTimeout),
		ResultGrace: w.cfg.ResultGrace, KillGrace: w.cfg.KillGrace, Starter: w.starter, Check: w.agent.CheckInit,
		StallTimeout: w.cfg.StallTimeout, StallExempt: w.parked,
		OnEvent: func(ev agent.Event) {
			if ev.Denied != nil {
				w.onDenial(cur, ev.Denied)
			}
			if ev.Permission != nil {
				w.onPermission(cur, *ev.Permission)
			}
			if ev.Retry != nil {
				r := ev.Retry
				w.pushProgress(cur, fmt.Sprintf("model API retry %d/%d (HTTP %d, %s), next in %d ms", r.Attempt, r.MaxRetries, r.Status, r.Error, int(math.Round(r.DelayMS))), nil, "", protocol.LevelWarning)
			}
		},
	}
}

// finish stores a task's output (see storeOutput), then makes the worker
// idle (or leaves it stopping) and asks to be paused.
func (w *Worker) finish(log *slog.Logger, cur *current, o protocol.Output, usage *rdb.TaskUsage) {
	now := w.now()
	w.mu.Lock()
	run := cur.run
	if run.State == protocol.RunQueued { // the agent never started
		_ = run.Transition(protocol.RunRunning, now)
	}
	if o.Status == protocol.StatusFailed || o.Status == protocol.StatusCancelled {
		_ = run.Fail(o.Error.Code, o.Error.Message, now)
	} else {
		_ = run.Transition(protocol.RunCompleted, now)
	}
	runFields := cur.runFields()
	w.mu.Unlock()
	if o.SessionID != "" {
		runFields[protocol.RunFieldSessionID] = o.SessionID // a task that answers this run continues it
	}
	// Progress and status events of the task go first.
	_ = w.pub.out.Flush(context.Background())
	published := w.storeOutput(log, cur.src, o, runFields, usage)

	w.mu.Lock()
	w.cur = nil
	w.tasksDone++
	done := w.tasksDone
	var stateErr error
	if !w.stopping { // a stopping worker stays stopping
		_, stateErr = w.machine.Transition(protocol.WorkerIdle, "task "+o.RequestID+" "+string(o.Status), now)
	}
	w.mu.Unlock()
	if stateErr != nil {
		log.Error("worker state", "err", stateErr)
	}
	ev := protocol.EventTaskCompleted
	var errText string
	switch o.Status {
	case protocol.StatusFailed:
		ev, errText = protocol.EventTaskFailed, string(o.Error.Code)+": "+o.Error.Message
	case protocol.StatusCancelled:
		ev = protocol.EventTaskCancelled
	}
	// Idle: no field of the task stays behind.
	w.pushStatus(map[string]any{protocol.StatusFieldRequestID: "", protocol.StatusFieldTaskID: "",
		protocol.StatusFieldOutputStream: "", protocol.StatusFieldTaskStarted: "", protocol.StatusFieldAttempt: "",
		protocol.StatusFieldTasksDone: done, protocol.StatusFieldError: errText})
	detail := map[string]any{"status": o.Status, "duration_ms": o.DurationMS, "published": published}
	if o.Error != nil {
		detail["code"] = o.Error.Code
	}
	w.pub.lifecycle(ev, o.RequestID, o.TaskID, detail)
	log.Info("task finished", "status", o.Status, "duration_ms", o.DurationMS, "published", published,
		"input_tokens", o.Usage.Input, "output_tokens", o.Usage.Output, "context_tokens", o.ContextTokens, "cost_usd", o.CostUSD,
		"error_code", errCode(o.Error))
	w.requestPause(o.RequestID, o.TaskID, "stop_output:"+string(o.Status))
}

// storeOutput stores a task's output with its run's terminal fields and
// its usage, and acknowledges its entry, in one atomic step
// (rdb.FinishTask), retried while Redis is unreachable: the output is
// never lost, and never published twice. When Redis refuses that step for
// good (a run key of the wrong type, a missing permission), the output
// still goes out, failed with INTERNAL_ERROR and saying why, without the
// run hash; when Redis refuses that too, the entry is acknowledged and the
// loss logged: a task Redis will not take must not wedge the loop. It
// reports whether an output was published.
func (w *Worker) storeOutput(log *slog.Logger, src taskSource, o protocol.Output, run map[string]any, usage *rdb.TaskUsage) bool {
	doc, err := o.Encode()
	if err != nil {
		log.Error("encode output", "err", err)
		return false
	}
	// With WAIT on (a sentinel URL), a write no replica acknowledged is
	// made again once, one WAIT timeout later: a failover that promoted a
	// replica the output had not reached has a new primary by then, which
	// the client has switched to, and the idempotent script publishes the
	// output there. A second short answer leaves it on the primary alone
	// (no replica in sync).
	var published bool
	short := 0
	_, err = store(w.pub, "output "+o.RequestID, func(c context.Context) (struct{}, error) {
		p, err := w.rdb.FinishTask(c, rdb.Finish{RequestID: o.RequestID, OutputStream: src.output, Output: doc, Run: run,
			InputStream: src.stream, Group: src.group, EntryID: src.entryID, Usage: usage, RunRetention: w.cfg.RunRetention})
		published = published || p
		if redisconn.IsNotReplicated(err) {
			if short++; short < 2 {
				time.Sleep(w.cfg.RedisWait.Timeout)
				return struct{}{}, err
			}
			log.Warn("task output stored on the primary alone: no replica acknowledged it", "err", err)
			err = nil
		}
		return struct{}{}, err
	})
	if err == nil {
		return published
	}
	fo := o
	fo.Status, fo.Result, fo.Question = protocol.StatusFailed, nil, ""
	fo.Error = protocol.NewError(protocol.CodeInternalError, "redis refused to store the task's output: %s", w.redact.Redact(err.Error()))
	if doc, err = fo.Encode(); err == nil {
		_, err = store(w.pub, "failed output "+o.RequestID, func(c context.Context) (struct{}, error) {
			return struct{}{}, w.rdb.PublishOutput(c, src.output, doc, src.stream, src.group, src.entryID)
		})
	}
	if err == nil {
		log.Error("output stored without its run hash, as failed", "code", protocol.CodeInternalError)
		return true
	}
	log.Error("task output lost: redis refused it", "err", err)
	if src.entryID != "" {
		_, _ = store(w.pub, "ack "+src.entryID, func(c context.Context) (struct{}, error) {
			return struct{}{}, w.rdb.Ack(c, src.stream, src.group, src.entryID)
		})
	}
	return false
}

// unrunOutput is the failed output of a task whose agent never ran.
func (w *Worker) unrunOutput(task protocol.Task, e *protocol.Error) protocol.Output {
	return protocol.Output{RequestID: task.RequestID, TaskID: task.TaskID, ProjectID: task.ProjectID, WorkerID: w.cfg.WorkerID,
		AgentType: w.cfg.AgentType, Status: protocol.StatusFailed, Error: e, Metadata: w.redact.RedactMap(task.Metadata), Timestamp: w.now()}
}

// reject answers a task entry that could not be decoded: a failed output
// with INVALID_TASK under the request id invalid-<entry id>, and the entry
// is acknowledged. A document that failed validation proves no request id:
// the one it claims is only echoed in the message, so that it can neither
// publish nor suppress the output of the run that really has that id
// (which may be running on another worker).
func (w *Worker) reject(src taskSource, data []byte, cause error) {
	reqID := "invalid-" + src.entryID
	msg := w.redact.Redact(cause.Error())
	if claimed := gjson.GetBytes(data, "request_id").String(); claimed != "" {
		msg += "; the entry's request_id was " + cutUTF8(w.redact.Redact(claimed), 256)
	}
	task := protocol.Task{RequestID: reqID}
	o := w.unrunOutput(task, protocol.NewError(protocol.CodeInvalidTask, "%s", msg))
	log := w.log.With("request_id", reqID)
	log.Warn("invalid task", "entry", src.entryID, "err", msg)
	now := w.now()
	run := protocol.NewRun(reqID, o.TaskID, w.cfg.WorkerID, "", now)
	_ = run.Fail(protocol.CodeInvalidTask, msg, now)
	w.storeOutput(log, src, o, run.Hash(), nil)
	w.pub.lifecycle(protocol.EventTaskFailed, reqID, o.TaskID, map[string]any{"code": protocol.CodeInvalidTask})
	w.requestPause(reqID, o.TaskID, "stop_output:"+string(o.Status))
}

// reportProgress records a progress report of the run that token belongs
// to: one more step on the run, and a Progress event on its output stream.
// Progress calls are the runtime's own channel: ALLOWED_COMMANDS does not
// govern them. A call that is refused is published as a warning of the
// running task, if any.
func (w *Worker) reportProgress(token string, rep protocol.ProgressReport) (int, error) {
	rep.Step, rep.Output = w.redact.Redact(rep.Step), w.redact.Redact(rep.Output)
	w.mu.Lock()
	cur := w.cur
	if cur == nil || !tokenEqual(token, cur.token) {
		w.mu.Unlock()
		if cur != nil {
			w.pushRefusal(cur, "progress", rep.Step, errNoRun.Error())
		}
		return 0, errNoRun
	}
	if err := cur.run.Step(rep.Step, w.now()); err != nil {
		w.mu.Unlock()
		w.pushRefusal(cur, "progress", rep.Step, err.Error())
		return 0, errNoRun
	}
	n := cur.run.StepsCompleted
	w.mu.Unlock()
	w.pushRun(cur)
	w.pushProgress(cur, rep.Step, rep.ProgressPct, rep.Output, "")
	return n, nil
}

func (w *Worker) pushProgress(cur *current, step string, pct *int, output, level string) {
	w.pushEvent(cur, protocol.Progress{Step: step, ProgressPct: pct, Output: output, Level: level})
}

// progressRefused publishes a progress call the endpoint could not take
// (a malformed report) as a warning of the run its token belongs to.
func (w *Worker) progressRefused(token string, body []byte, cause error) {
	w.mu.Lock()
	cur := w.cur
	own := cur != nil && tokenEqual(token, cur.token)
	w.mu.Unlock()
	if own {
		w.pushRefusal(cur, "progress", string(body), cause.Error())
	}
}

// pushEvent publishes a progress event of cur, with the ids, the run's
// step count and the time filled in, and its text redacted.
func (w *Worker) pushEvent(cur *current, p protocol.Progress) {
	if cur.src.output == "" { // a run of the wrapper's own (a session summary)
		return
	}
	w.mu.Lock()
	n := cur.run.StepsCompleted
	w.mu.Unlock()
	p.WorkerID, p.RequestID, p.TaskID, p.StepsCompleted, p.Timestamp = w.cfg.WorkerID, cur.task.RequestID, cur.task.TaskID, n, w.now()
	p.Step, p.Output = w.redact.Redact(p.Step), w.redact.Redact(p.Output)
	doc, err := p.Encode()
	if err != nil {
		return
	}
	w.pub.entry("progress", cur.src.output, doc)
}

// pushRun writes the run hash of cur as it stands.
func (w *Worker) pushRun(cur *current) {
	w.mu.Lock()
	fields := cur.runFields()
	w.mu.Unlock()
	w.pub.run(cur.task.RequestID, fields)
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
