package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// A task entry's path, after input.go routed it here: admit (is it to
// run at all, and on which attempt), execute (the agent, in its session),
// finish (its output, stored with its run and usage). Each step is a
// method of taskRun, in that order.

// taskSource is where a task came from and where its output goes.
type taskSource struct {
	stream, group, entryID string // its input entry
	output                 string // its output stream; "" for a run of the wrapper's own
	own                    bool   // the entry was this worker's already when read (pending): never handed on
}

// current is a task in flight. Its cancel, steering and spend own their
// state; mu guards the run and what the agent's start sets.
type current struct {
	task     protocol.Task
	attempt  int
	src      taskSource
	deadline time.Time // when the current attempt's timeout ends (guarded by mu: a retry moves it)
	cancel   *interruptible
	steer    *taskSteer
	spend    *taskSpend // what its model calls cost, as the proxy metered them (cost.go)

	mu       sync.Mutex // guards the fields below
	run      *protocol.Run
	token    string // the progress token its reports carry
	agentPID int
	dir      string // where the agent runs: the task's git worktree; "": the workspace
	// parkedUntil is when the model call the proxy parked (rate limit)
	// goes out again (heal.go).
	parkedUntil time.Time
}

func newCurrent(task protocol.Task, src taskSource, run *protocol.Run) *current {
	return &current{task: task, src: src, run: run, cancel: newInterruptible(), steer: &taskSteer{}, spend: &taskSpend{}}
}

// runFields returns the fields of the run hash.
func (c *current) runFields() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.run.Hash()
	f[protocol.RunFieldAttempt] = c.attempt
	return f
}

func (c *current) progressToken() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

func (c *current) setToken(token string) {
	c.mu.Lock()
	c.token = token
	c.mu.Unlock()
}

// workdir is where the agent runs for the task: its worktree, else
// workspace.
func (c *current) workdir(workspace string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir != "" {
		return c.dir
	}
	return workspace
}

func (c *current) pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agentPID
}

// transition moves the run, if it can.
func (c *current) transition(to protocol.RunState, at time.Time) {
	c.mu.Lock()
	_ = c.run.Transition(to, at)
	c.mu.Unlock()
}

// tasks is the third stage of the pipeline: it runs each task entry the
// router hands it to its output, in three steps (admit, execute, finish),
// and owns what those steps decide: the run's attempt, its refusals
// (answered run, budget, a cancel that came first), its retries
// (retry.go), the output built from the agent's outcome. The agent's run
// itself is the agent runner's (agentrun.go); what the task tells Redis
// is the publisher's.
type tasks struct {
	tasksParams
}

// tasksParams are what the task runner is built from: its
// collaborators and settings, none of them the Worker.
type tasksParams struct {
	disk      diskWatch
	rdb       taskRedis
	agents    *agentRunner
	sessions  SessionPolicy
	spend     *spending
	state     *workerState
	cancels   *cancels
	steering  *steering
	pub       *publisher
	status    *statusReporter
	outputs   outputs
	terminate *terminator
	// lookAhead notes the cancels queued behind a task's entry (input.go).
	lookAhead func(ctx context.Context, log *slog.Logger, stream, entryID string)
	log       *slog.Logger
	now       func() time.Time

	workerID    string
	project     string // the project the worker is bound to ("": any)
	agentType   protocol.AgentType
	caps        agent.Capabilities
	taskTimeout time.Duration
	retry       protocol.RetryPolicy // the defaults of a task's retry
	jsonSchema  bool
	git         gitParams
}

func newTasks(p tasksParams) *tasks { return &tasks{tasksParams: p} }

// taskRedis is what a task's admission reads.
type taskRedis interface {
	rdb.Runs
	rdb.Budgets
}

// taskRun is one task entry's run: its steps, and what they hand on.
type taskRun struct {
	ts    *tasks
	ctx   context.Context // once read, a task's own Redis work outlives shutdown's start (the publisher's final context bounds it): its output, usage and session record are kept
	stop  context.Context // ends when shutdown begins: no further attempt starts
	log   *slog.Logger
	src   taskSource
	entry *rdb.Entry
	task  protocol.Task
	cur   *current

	answered rdb.AnsweredRun
	budget   rdb.ProjectSpend
}

// run runs a task entry to its output: admit, execute, finish.
func (ts *tasks) run(ctx context.Context, src taskSource, e *rdb.Entry, task protocol.Task) {
	t := &taskRun{ts: ts, ctx: ts.pub.final, stop: ctx, src: src, entry: e, task: task,
		log: ts.log.With("request_id", task.RequestID, "task_id", task.TaskID, "project_id", task.Project())}
	if !t.admit() {
		return
	}
	work, ok := t.prepareGit()
	if !ok {
		return
	}
	o, usage := t.attempts()
	o = t.finishGit(work, o)
	o.Disk = ts.disk.full(t.cur, ts.pub)
	t.finish(o, usage)
	ts.budgetWarning(t.task, t.budget, o.CostUSD)
}

// finishPanicked answers the task in flight cur, whose handling panicked,
// with o (recover.go).
func (ts *tasks) finishPanicked(log *slog.Logger, src taskSource, e *rdb.Entry, cur *current, o protocol.Output) {
	t := &taskRun{ts: ts, ctx: ts.pub.final, stop: ts.pub.final, log: log, src: src, entry: e, task: cur.task, cur: cur}
	t.finish(o, nil)
}

// admit makes the task the one in flight, unless it is not to run: a
// task whose run is already terminal was answered before (the wrapper
// died between storing the output and acknowledging, or the producer sent
// a request id twice), and is acknowledged again, publishing nothing; a
// task read as shutdown began stays pending. A task that cannot run (its
// answered run, its project's budget, a cancel that came first) is
// answered failed. It reports whether the task goes on to execute.
func (t *taskRun) admit() bool {
	ts, task := t.ts, t.task
	rec, err := store(ts.pub, "read run "+task.RequestID, func(c context.Context) (rdb.RunRecord, error) {
		return ts.rdb.RunRecord(c, task.RequestID)
	})
	if errors.Is(err, errStoreEnded) {
		t.log.Info("shutdown ended before the run could be read: the task stays pending", "err", err)
		return false
	}
	if err != nil {
		o := ts.outputs.unrun(task, protocol.NewError(protocol.CodeInternalError, "redis refused to read the run: %v", err))
		ts.pub.storeOutput(t.log, t.src, o, nil, nil)
		ts.pub.lifecycle(protocol.EventTaskFailed, task.RequestID, task.TaskID, map[string]any{"code": protocol.CodeInternalError})
		ts.status.requestPause(task.RequestID, task.TaskID, "stop_output:"+string(o.Status))
		return false
	}
	if rec.State.Terminal() {
		t.log.Info("task already finished, acknowledging it again", "run_status", rec.State)
		ts.pub.ack(t.src)
		ts.status.requestPause(task.RequestID, task.TaskID, "duplicate_task:"+string(rec.State))
		return false
	}
	// Every delivery counts: of this entry (a redelivery after a restart
	// or a lost reply), and the entries the spawner requeued before it;
	// so do the retries a wrapper ran before (the run's last attempt).
	deliveries, _ := ts.rdb.DeliveryCount(t.ctx, t.src.stream, t.src.group, t.entry.ID)
	attempt := int(max(rec.Requeues+max(deliveries, 1), rec.Attempt+1))
	var answerErr *protocol.Error
	t.task, answerErr = ts.inProject(task)
	task = t.task
	if answerErr == nil && task.Answers != "" {
		t.task, t.answered, answerErr = ts.answeredRun(task)
		t.log = t.log.With("project_id", t.task.Project(), "answers", t.task.Answers)
	}
	if !t.start(attempt) {
		t.log.Info("shutdown began: the task stays pending")
		return false
	}
	if refusal := t.refusal(answerErr); refusal != nil {
		t.finish(*refusal, nil)
		return false
	}
	return true
}

// start makes the task the one in flight, queued, and publishes so.
func (t *taskRun) start(attempt int) bool {
	ts, task, now := t.ts, t.task, t.ts.now()
	run := protocol.NewRun(task.RequestID, task.TaskID, ts.workerID, task.Project(), now)
	run.AgentSlug, run.Trigger = string(ts.agentType), task.Trigger
	cur := newCurrent(task, t.src, run)
	cur.attempt, cur.token, cur.deadline = attempt, newToken(), now.Add(task.Timeout(ts.taskTimeout))
	ok, err := ts.state.begin(cur)
	if err != nil {
		ts.log.Error("worker state", "err", err)
	}
	if !ok {
		return false
	}
	t.cur = cur
	ts.cancels.take(cur)
	ts.steering.take(cur)
	ts.lookAhead(t.ctx, t.log, t.src.stream, t.entry.ID)
	ts.pub.run(cur)
	cur.transition(protocol.RunQueued, now)
	ts.pub.run(cur)
	ts.status.push(map[string]any{protocol.StatusFieldRequestID: task.RequestID, protocol.StatusFieldTaskID: task.TaskID,
		protocol.StatusFieldOutputStream: t.src.output, protocol.StatusFieldTaskStarted: protocol.FormatTime(now),
		protocol.StatusFieldAttempt: attempt})
	return true
}

// refusal is the output of an admitted task that does not run: its
// answered run is not there, its project spent its budget, or a cancel
// came first. nil: it runs.
func (t *taskRun) refusal(answerErr *protocol.Error) *protocol.Output {
	ts, task, attempt := t.ts, t.task, t.cur.attempt
	if answerErr != nil {
		o := ts.outputs.unrun(task, answerErr)
		o.Answers, o.Attempt = task.Answers, attempt
		return &o
	}
	budget, budgetErr := ts.checkBudget(t.ctx, task)
	if budgetErr != nil {
		o := ts.outputs.unrun(task, budgetErr)
		o.ProjectID, o.Answers, o.Attempt = task.Project(), task.Answers, attempt
		return &o
	}
	t.budget = budget
	if cancelled, reason, _ := t.cur.cancel.state(); cancelled {
		o := ts.outputs.cancelled(ts.outputs.unrun(task, nil), reason, false)
		o.ProjectID, o.Attempt = task.Project(), attempt
		return &o
	}
	return nil
}

// execute runs the agent in the task's session (resume, when not "": the
// session of the attempt before, which a retry continues): the task's
// turn, the turns of the steering messages that came during it
// (agentRunner.runTask), and the run again in a new session when a resume
// failed (SessionPolicy.Complete). oomBefore is the OOM kill count before
// the agent started.
func (t *taskRun) execute(resume string) (outcome agent.Outcome, plan SessionPlan, oomBefore int64) {
	ts, task, cur := t.ts, t.task, t.cur
	ts.spend.unenforced(cur)
	plan = ts.sessions.Decide(t.ctx, task)
	if task.Answers != "" {
		plan = answerPlan(plan, t.answered)
	}
	if resume != "" {
		plan = retryPlan(plan, resume)
	}
	t.log.Info("task started", "resume", plan.ResumeID != "", "session_reason", plan.Decision.Reason, "attempt", cur.attempt)
	oomBefore = oomKills()
	outcome, rerun := ts.agents.runTask(t.ctx, task, plan, cur)
	outcome, plan = ts.sessions.Complete(t.ctx, task, plan, outcome, rerun)
	return outcome, plan, oomBefore
}

// output is the task's output from its agent's outcome, and its usage
// (nil when the agent never started).
func (t *taskRun) output(outcome agent.Outcome, plan SessionPlan, oomBefore int64) (protocol.Output, *rdb.TaskUsage) {
	ts, task, cur := t.ts, t.task, t.cur
	verdict := agent.Judge(outcome, ts.jsonSchema)
	// A crash while the OOM killer fired in this container is an OOM: the
	// container lives on (its PID 1 is the wrapper), so only the cgroup's
	// counter tells.
	if verdict.Error != nil && verdict.Error.Code == protocol.CodeAgentCrashed && oomBefore >= 0 && oomKills() > oomBefore {
		verdict.Error = protocol.NewError(protocol.CodeOOMKilled, "the OOM killer ended the agent (%s); raise the worker's memory limit", outcome.Exit)
	}
	o := ts.outputs.output(task, outcome, verdict, plan, cur.attempt)
	ts.spend.estimateCost(&o, cur, outcome)
	o.Answers = task.Answers
	if r := outcome.Result; r != nil && r.Subtype == "error_max_budget_usd" && o.Error != nil {
		o.Error = protocol.NewError(protocol.CodeBudgetExceeded, "the task spent its max_budget_usd (%g): %s", task.MaxBudgetUSD, o.Error.Message)
	}
	if outcome.Interrupted {
		if _, reason, abort := cur.cancel.state(); abort != nil {
			o.Status, o.Result, o.Question, o.Error = protocol.StatusFailed, nil, "", abort
		} else {
			o = ts.outputs.cancelled(o, reason, true)
		}
	}
	if outcome.StartErr != nil {
		return o, nil
	}
	// The agent ran: its task counts, once, with its output's usage.
	return o, &rdb.TaskUsage{Project: task.Project(), Session: o.SessionID, Worker: ts.workerID, Usage: o.Usage, CostUSD: o.CostUSD}
}

// finish stores the task's output with its run's terminal fields and its
// usage (publisher.storeOutput), then makes the worker idle (or leaves it
// stopping) and asks to be paused.
func (t *taskRun) finish(o protocol.Output, usage *rdb.TaskUsage) {
	ts, cur, log := t.ts, t.cur, t.log
	now := ts.now()
	cur.mu.Lock()
	if cur.run.State == protocol.RunQueued { // the agent never started
		_ = cur.run.Transition(protocol.RunRunning, now)
	}
	if o.Status == protocol.StatusFailed || o.Status == protocol.StatusCancelled {
		_ = cur.run.Fail(o.Error.Code, o.Error.Message, now)
	} else {
		_ = cur.run.Transition(protocol.RunCompleted, now)
	}
	cur.mu.Unlock()
	runFields := cur.runFields()
	if o.SessionID != "" {
		runFields[protocol.RunFieldSessionID] = o.SessionID // a task that answers this run continues it
	}
	// Progress and status events of the task go first (while Redis
	// answers; the shutdown's bound ends the wait).
	_ = ts.pub.out.Flush(ts.pub.final)
	published := ts.pub.storeOutput(log, cur.src, o, runFields, usage)

	done, err := ts.state.end("task " + o.RequestID + " " + string(o.Status))
	if err != nil {
		log.Error("worker state", "err", err)
	}
	ts.status.taskEnded(o, usage != nil)
	ts.finished(log, o, done, published)
}

// publishFinished publishes that the task finished: the idle status hash
// (no field of the task stays behind), the lifecycle event, the log line,
// the request to be paused.
func (ts *tasks) finished(log *slog.Logger, o protocol.Output, done int64, published bool) {
	ev := protocol.EventTaskCompleted
	var errText string
	switch o.Status {
	case protocol.StatusFailed:
		ev, errText = protocol.EventTaskFailed, string(o.Error.Code)+": "+o.Error.Message
	case protocol.StatusCancelled:
		ev = protocol.EventTaskCancelled
	}
	ts.status.push(map[string]any{protocol.StatusFieldRequestID: "", protocol.StatusFieldTaskID: "",
		protocol.StatusFieldOutputStream: "", protocol.StatusFieldTaskStarted: "", protocol.StatusFieldAttempt: "",
		protocol.StatusFieldTasksDone: done, protocol.StatusFieldError: errText})
	detail := map[string]any{"status": o.Status, "duration_ms": o.DurationMS, "published": published}
	if o.Error != nil {
		detail["code"] = o.Error.Code
	}
	ts.pub.lifecycle(ev, o.RequestID, o.TaskID, detail)
	log.Info("task finished", "status", o.Status, "duration_ms", o.DurationMS, "published", published,
		"input_tokens", o.Usage.Input, "output_tokens", o.Usage.Output, "context_tokens", o.ContextTokens, "cost_usd", o.CostUSD,
		"error_code", errCode(o.Error))
	ts.status.requestPause(o.RequestID, o.TaskID, "stop_output:"+string(o.Status))
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
