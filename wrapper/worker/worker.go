package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Worker reads tasks and runs the agent for each.
type Worker struct {
	cfg      Config
	rdb      *rdb.RDB
	log      *slog.Logger
	starter  agent.Starter
	redact   *Redactor
	out      *Outbox
	sessions SessionPolicy
	now      func() time.Time
	environ  []string

	progress *progressServer // set once by Run, under mu

	// terminate ends the running agent at once (the shutdown grace ran
	// out, or a second signal came).
	terminateOnce sync.Once
	terminateCh   chan struct{}

	// The persistent agent process (AGENT_PERSISTENT), owned by the task
	// loop's goroutine.
	persist        *agent.Persistent
	persistSession string // the session it holds
	persistToken   string // the progress token in its environment
	persistDeaths  int
	persistOff     bool // it died too often: one process per task from now on

	mu        sync.Mutex // guards the fields below
	machine   *protocol.WorkerMachine
	cur       *current // the task in flight; nil when idle
	tasksDone int64
	stopping  bool
}

// current is the task in flight.
type current struct {
	task     protocol.Task
	run      *protocol.Run
	token    string
	output   string // its output stream
	entryID  string
	agentPID int
}

// Options are the Worker's collaborators; zero values take defaults.
type Options struct {
	Logger   *slog.Logger
	Starter  agent.Starter // the reaper, in production
	Sessions SessionPolicy
	Now      func() time.Time
	Environ  []string // the wrapper's environment (os.Environ())
}

// New returns a Worker for cfg. It does not touch Redis yet.
func New(cfg Config, opts Options) (*Worker, error) {
	r, err := rdb.Open(cfg.RedisURL, cfg.Keys)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, rdb: r, log: opts.Logger, starter: opts.Starter, sessions: opts.Sessions,
		now: opts.Now, environ: opts.Environ, terminateCh: make(chan struct{})}
	if w.log == nil {
		w.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	w.log = w.log.With("worker_id", cfg.WorkerID)
	if w.starter == nil {
		w.starter = agent.DirectStarter{}
	}
	if w.sessions == nil {
		if cfg.SessionPolicy == "new" {
			w.sessions = NewSessions{}
		} else {
			w.sessions = NewProjectSessions(w, cfg.Sessions)
		}
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.environ == nil {
		w.environ = os.Environ()
	}
	w.redact = NewRedactor(w.environ, cfg.RedisURL)
	w.out = NewOutbox(cfg.EventBuffer, w.log)
	w.out.Permanent = rdb.IsServerError
	w.machine = protocol.NewWorkerMachine(cfg.WorkerID, w.now())
	return w, nil
}

// ProgressURL returns the URL of the progress endpoint, once Run has
// started it.
func (w *Worker) ProgressURL() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.progress == nil {
		return ""
	}
	return w.progress.url
}

// Terminate ends the running agent now (SIGTERM to its group, SIGKILL
// after KILL_GRACE); its task fails with TERMINATED. Safe to call twice.
func (w *Worker) Terminate() { w.terminateOnce.Do(func() { close(w.terminateCh) }) }

// Run serves tasks until ctx ends, then finishes the task in flight and
// shuts down: it publishes stopping, waits for the task (Terminate cuts
// that short), publishes stopped. Shutdown order: stop reading input first,
// then finish the task and publish its output, then the last events.
func (w *Worker) Run(ctx context.Context) error {
	apiKey, home := "", ""
	for _, kv := range w.environ {
		if v, ok := strings.CutPrefix(kv, "ANTHROPIC_API_KEY="); ok {
			apiKey = v
		}
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	if err := w.cfg.PrepareWorkspace(home, apiKey); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	p, err := startProgressServer(w, w.cfg.ProgressAddr)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.mu.Lock()
	w.progress = p
	w.mu.Unlock()
	defer p.close()

	bg, stopBG := context.WithCancel(context.Background())
	var bgDone sync.WaitGroup
	bgDone.Add(2)
	go func() { defer bgDone.Done(); w.out.Run(bg) }()
	go func() { defer bgDone.Done(); w.heartbeat(bg) }()
	defer func() { stopBG(); bgDone.Wait() }()

	started := w.now()
	w.transition(protocol.WorkerIdle, "started")
	w.pushStatus(map[string]any{protocol.StatusFieldStartedAt: protocol.FormatTime(started),
		protocol.StatusFieldAgentType: string(w.cfg.AgentType), protocol.StatusFieldKind: string(w.cfg.Kind),
		protocol.StatusFieldRequestID: "", protocol.StatusFieldTaskID: "", protocol.StatusFieldError: ""})
	w.pushLifecycle(protocol.EventStarted, "", "", map[string]any{"agent_type": w.cfg.AgentType, "kind": w.cfg.Kind, "progress_url": p.url})
	w.log.Info("worker started", "agent_type", w.cfg.AgentType, "kind", w.cfg.Kind,
		"input", w.cfg.Keys.InputFor(w.cfg.Kind, w.cfg.WorkerID), "progress_url", p.url)

	w.loop(ctx)
	if w.persist != nil {
		w.persist.Close()
	}

	// Shutdown.
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	w.transition(protocol.WorkerStopping, "shutdown")
	w.pushLifecycle(protocol.EventStopping, "", "", nil)
	w.transition(protocol.WorkerStopped, "shutdown complete")
	w.pushLifecycle(protocol.EventStopped, "", "", map[string]any{"tasks_completed": w.tasksDone})
	flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.out.Flush(flushCtx); err != nil {
		w.log.Warn("shutdown: events not written before the deadline", "pending", w.out.Len())
	}
	_ = w.rdb.Del(flushCtx, w.cfg.Keys.Heartbeat(w.cfg.WorkerID))
	w.log.Info("worker stopped", "tasks_completed", w.tasksDone, "events_dropped", w.out.Dropped())
	return nil
}

// loop reads and runs tasks until ctx ends. It first finishes the entries
// this consumer was given before and never acknowledged.
func (w *Worker) loop(ctx context.Context) {
	stream := w.cfg.Keys.InputFor(w.cfg.Kind, w.cfg.WorkerID)
	group := protocol.GroupFor(w.cfg.Kind)
	defer context.AfterFunc(ctx, w.rdb.StopReading)()
	backoff := newBackoff()
	groupReady, pending := false, true
	for ctx.Err() == nil {
		if !groupReady {
			if err := w.rdb.EnsureGroup(ctx, stream, group); err != nil {
				w.log.Warn("input not reachable, retrying", "stream", stream, "err", err)
				backoff.wait(ctx)
				continue
			}
			groupReady = true
		}
		e, err := w.rdb.ReadTask(ctx, stream, group, w.cfg.WorkerID, pending, 5*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, rdb.ErrNoGroup) {
				groupReady = false
			}
			w.log.Warn("read input failed, retrying", "stream", stream, "err", err)
			backoff.wait(ctx)
			continue
		}
		backoff.reset()
		if e == nil {
			pending = false // the backlog of this consumer is done
			continue
		}
		w.handle(ctx, stream, group, e)
	}
}

// handle runs one task entry to its output.
func (w *Worker) handle(ctx context.Context, stream, group string, e *rdb.Entry) {
	outStream := w.cfg.Keys.OutputFor(w.cfg.Kind, w.cfg.WorkerID)
	data, err := protocol.EntryData(e.Values)
	var task protocol.Task
	if err == nil {
		task, err = protocol.DecodeTask(data)
	}
	if err != nil {
		w.reject(stream, group, outStream, e.ID, data, err)
		return
	}
	log := w.log.With("request_id", task.RequestID, "task_id", task.TaskID, "project_id", task.Project())

	// A task whose run is already terminal was answered before (the
	// wrapper died between storing the output and acknowledging, or the
	// producer sent a request id twice): acknowledge, publish nothing.
	state := retry(w, func(c context.Context) (protocol.RunState, error) { return w.rdb.RunState(c, task.RequestID) })
	if state.Terminal() {
		log.Info("task already finished, acknowledging it again", "run_status", state)
		retry(w, func(c context.Context) (struct{}, error) { return struct{}{}, w.rdb.Ack(c, stream, group, e.ID) })
		return
	}
	attempt := 1
	if w.cfg.Kind == protocol.KindDeveloper {
		if n, err := w.rdb.DeliveryCount(ctx, stream, group, e.ID); err == nil && n > 0 {
			attempt = int(n)
		}
	}

	now := w.now()
	run := protocol.NewRun(task.RequestID, task.TaskID, w.cfg.WorkerID, task.Project(), now)
	cur := &current{task: task, run: run, token: newToken(), output: outStream, entryID: e.ID}
	w.mu.Lock()
	w.cur = cur
	w.mu.Unlock()
	w.transition(protocol.WorkerBusy, "task "+task.RequestID)
	w.pushRun(run)
	_ = run.Transition(protocol.RunQueued, now)
	w.pushRun(run)
	w.pushStatus(map[string]any{protocol.StatusFieldRequestID: task.RequestID, protocol.StatusFieldTaskID: task.TaskID,
		protocol.StatusFieldOutputStream: outStream, protocol.StatusFieldTaskStarted: protocol.FormatTime(now),
		protocol.StatusFieldAttempt: attempt})

	plan := w.sessions.Decide(ctx, task)
	spec := w.agentSpec(task, invocationFor(w.cfg.AgentType, task, plan), cur)
	spec.OnStart = func(pid int) {
		w.mu.Lock()
		cur.agentPID = pid
		_ = run.Transition(protocol.RunRunning, w.now())
		w.mu.Unlock()
		w.pushRun(run)
		w.pushLifecycle(protocol.EventTaskStarted, task.RequestID, task.TaskID, map[string]any{"pid": pid, "attempt": attempt})
	}
	log.Info("task started", "resume", plan.ResumeID != "", "session_reason", plan.Decision.Reason, "attempt", attempt)

	agentCtx, cancel := context.WithCancel(context.Background())
	// ctx ending (shutdown) does not stop the task: it gets the grace,
	// and Terminate stops it when the grace runs out.
	go func() {
		select {
		case <-w.terminateCh:
			cancel()
		case <-agentCtx.Done():
		}
	}()
	oomBefore := oomKills()
	var outcome agent.Outcome
	if w.cfg.Persistent && !w.persistOff {
		outcome = w.runPersistent(agentCtx, task, plan, cur, spec)
	} else {
		outcome = agent.Run(agentCtx, spec)
	}
	cancel()

	outcome, plan = w.sessions.Complete(ctx, task, plan, outcome, func(inv Invocation) agent.Outcome {
		spec.Argv = w.cfg.Argv(inv)
		rerunCtx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-w.terminateCh:
				cancel()
			case <-rerunCtx.Done():
			}
		}()
		return agent.Run(rerunCtx, spec)
	})
	verdict := agent.Judge(outcome, w.cfg.JSONSchema)
	// A crash while the OOM killer fired in this container is an OOM: the
	// container lives on (its PID 1 is the wrapper), so only the cgroup's
	// counter tells.
	if verdict.Error != nil && verdict.Error.Code == protocol.CodeAgentCrashed && oomBefore >= 0 && oomKills() > oomBefore {
		verdict.Error = protocol.NewError(protocol.CodeOOMKilled, "the OOM killer ended the agent (%s); raise the worker's memory limit", outcome.Exit)
	}
	o := w.output(task, outcome, verdict, plan, attempt)
	w.finish(log, cur, stream, group, o)
}

// runPersistent runs a task in the persistent agent process, starting one
// (for the plan's session) when none serves that session.
func (w *Worker) runPersistent(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec) agent.Outcome {
	o, reused := w.sendPersistent(ctx, task, plan, cur, spec)
	notRun := o.Events == 0 || (o.Result != nil && o.Result.IsError && o.Result.Turns == 0)
	if reused && notRun && !o.TimedOut && !o.Cancelled && w.persist == nil {
		// The process had died before it took up the message (between
		// tasks; a part of it that outlived the rest answers with an error
		// of no turns): the message was not run, so run it in a new process.
		w.log.Warn("the persistent agent had died: starting another for this task")
		o, _ = w.sendPersistent(ctx, task, plan, cur, spec)
	}
	return o
}

func (w *Worker) sendPersistent(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec) (agent.Outcome, bool) {
	if w.persist != nil && (!w.persist.Alive() || plan.ResumeID == "" || plan.ResumeID != w.persistSession) {
		w.persist.Close()
		w.persist = nil
	}
	onStart := spec.OnStart
	reused := false
	if w.persist == nil {
		token := newToken()
		pspec := spec
		pspec.Argv = w.cfg.PersistentArgv(invocationFor(w.cfg.AgentType, task, plan))
		pspec.Env = w.cfg.AgentEnv(w.environ, w.ProgressURL(), token, task)
		p, err := agent.StartPersistent(pspec)
		if err != nil {
			w.log.Warn("persistent agent did not start: one process for this task", "err", err)
			return agent.Run(ctx, spec), false
		}
		w.persist, w.persistToken, w.persistSession = p, token, plan.ResumeID
		w.log.Info("persistent agent started", "pid", p.Pid(), "resume", plan.ResumeID)
	} else {
		reused = true
		if onStart != nil {
			onStart(w.persist.Pid())
		}
	}
	w.mu.Lock()
	cur.token = w.persistToken
	w.mu.Unlock()
	o := w.persist.Send(ctx, agent.ClaudeUserMessage(task.Prompt), spec.Timeout, spec.OnEvent)
	if o.Result != nil && o.Result.SessionID != "" {
		w.persistSession = o.Result.SessionID
	}
	if !w.persist.Alive() {
		w.persist.Close()
		w.persist = nil
		if o.Result == nil && !o.TimedOut && !o.Cancelled {
			w.persistDeaths++
			if w.persistDeaths >= 2 {
				w.persistOff = true
				w.log.Warn("the persistent agent died twice: one process per task from now on")
			}
		}
	}
	return o, reused
}

// agentSpec is how to run the agent for a task of the run cur.
func (w *Worker) agentSpec(task protocol.Task, inv Invocation, cur *current) agent.Spec {
	return agent.Spec{
		Argv: w.cfg.Argv(inv), Env: w.cfg.AgentEnv(w.environ, w.ProgressURL(), cur.token, task),
		Dir: w.cfg.Workspace, Parser: w.cfg.Parser(), PTY: w.cfg.PTY, Timeout: task.Timeout(w.cfg.TaskTimeout),
		ResultGrace: w.cfg.ResultGrace, KillGrace: w.cfg.KillGrace, Starter: w.starter,
		OnEvent: func(ev agent.Event) {
			if ev.Retry != nil {
				r := ev.Retry
				w.pushProgress(cur, fmt.Sprintf("model API retry %d/%d (HTTP %d, %s), next in %d ms", r.Attempt, r.MaxRetries, r.Status, r.Error, int(math.Round(r.DelayMS))), nil, "", protocol.LevelWarning)
			}
		},
	}
}

// output builds the Output event of a task.
func (w *Worker) output(task protocol.Task, oc agent.Outcome, v agent.Verdict, plan SessionPlan, attempt int) protocol.Output {
	o := protocol.Output{
		RequestID: task.RequestID, TaskID: task.TaskID, ProjectID: task.Project(), WorkerID: w.cfg.WorkerID,
		AgentType: w.cfg.AgentType, Status: v.Status, Response: w.redact.Redact(v.Response), Result: v.Result,
		Question: v.Question, DurationMS: oc.Duration.Milliseconds(), Metadata: task.Metadata, Timestamp: w.now(),
	}
	if w.cfg.Kind == protocol.KindDeveloper {
		o.Attempt = attempt
	}
	if d := plan.Decision; d.Action != "" {
		o.Session = &d
	}
	if v.Error != nil {
		e := *v.Error
		e.Message = w.redact.Redact(e.Message)
		o.Error = &e
	}
	if r := oc.Result; r != nil {
		o.SessionID, o.Usage, o.CostUSD = r.SessionID, r.Usage, r.CostUSD
		// The context is what the LAST API call used; the result's usage
		// sums every call of the run. Droid reports no per-call usage: its
		// summed figure is an upper bound.
		o.ContextTokens = r.Usage.Context()
	}
	if oc.LastTurn != nil {
		o.ContextTokens = oc.LastTurn.Usage.Context()
	}
	if o.SessionID == "" && oc.Init != nil {
		o.SessionID = oc.Init.SessionID
	}
	if o.CostUSD < 0 || math.IsNaN(o.CostUSD) {
		o.CostUSD = 0
	}
	return o
}

// finish stores a task's output, marks its run terminal and acknowledges
// its entry, in one atomic step, retrying until Redis takes it: the output
// is never lost, and never published twice.
func (w *Worker) finish(log *slog.Logger, cur *current, stream, group string, o protocol.Output) {
	now := w.now()
	w.mu.Lock()
	run := cur.run
	if run.State == protocol.RunQueued { // the agent never started
		_ = run.Transition(protocol.RunRunning, now)
	}
	if o.Status == protocol.StatusFailed {
		_ = run.Fail(o.Error.Code, o.Error.Message, now)
	} else {
		_ = run.Transition(protocol.RunCompleted, now)
	}
	runFields := run.Hash()
	w.mu.Unlock()
	doc, err := o.Encode()
	if err != nil {
		log.Error("encode output", "err", err)
		return
	}
	// Progress and status events of the task go first.
	_ = w.out.Flush(context.Background())
	published := retry(w, func(c context.Context) (bool, error) {
		return w.rdb.FinishTask(c, rdb.Finish{RequestID: o.RequestID, OutputStream: cur.output, Output: doc,
			Run: runFields, InputStream: stream, Group: group, EntryID: cur.entryID})
	})
	w.mu.Lock()
	w.cur = nil
	w.tasksDone++
	done := w.tasksDone
	w.mu.Unlock()
	ev := protocol.EventTaskCompleted
	var errText string
	if o.Status == protocol.StatusFailed {
		ev, errText = protocol.EventTaskFailed, string(o.Error.Code)+": "+o.Error.Message
	}
	w.transition(protocol.WorkerIdle, "task "+o.RequestID+" "+string(o.Status))
	w.pushStatus(map[string]any{protocol.StatusFieldRequestID: "", protocol.StatusFieldTaskID: "",
		protocol.StatusFieldOutputStream: "", protocol.StatusFieldTasksDone: done, protocol.StatusFieldError: errText})
	detail := map[string]any{"status": o.Status, "duration_ms": o.DurationMS, "published": published}
	if o.Error != nil {
		detail["code"] = o.Error.Code
	}
	w.pushLifecycle(ev, o.RequestID, o.TaskID, detail)
	log.Info("task finished", "status", o.Status, "duration_ms", o.DurationMS, "published", published,
		"input_tokens", o.Usage.Input, "output_tokens", o.Usage.Output, "context_tokens", o.ContextTokens, "cost_usd", o.CostUSD,
		"error_code", errCode(o.Error))
	if w.cfg.PauseAfterOutput {
		w.requestPause(o)
	}
}

func errCode(e *protocol.Error) string {
	if e == nil {
		return ""
	}
	return string(e.Code)
}

// requestPause asks the spawner to pause this worker: the wrapper never
// pauses itself.
func (w *Worker) requestPause(o protocol.Output) {
	c := protocol.Control{Action: protocol.ControlPause, WorkerID: w.cfg.WorkerID,
		Reason: "stop_output:" + string(o.Status), RequestID: o.RequestID, Timestamp: w.now()}
	doc, err := c.Encode()
	if err != nil {
		return
	}
	key := w.cfg.Keys.Control()
	w.out.Push("control pause", func(ctx context.Context) error { return w.rdb.XAdd(ctx, key, doc) })
	w.pushLifecycle(protocol.EventPauseRequested, o.RequestID, o.TaskID, map[string]any{"reason": c.Reason})
}

// reject answers a task entry that could not be decoded: a failed output
// with INVALID_TASK, and the entry is acknowledged.
func (w *Worker) reject(stream, group, outStream, entryID string, data []byte, cause error) {
	reqID := gjson.GetBytes(data, "request_id").String()
	if reqID == "" || checkID(reqID) != nil || len(reqID) > protocol.MaxIDLen {
		reqID = "invalid-" + entryID
	}
	o := protocol.Output{RequestID: reqID, WorkerID: w.cfg.WorkerID, AgentType: w.cfg.AgentType,
		Status: protocol.StatusFailed, Error: protocol.NewError(protocol.CodeInvalidTask, "%v", cause), Timestamp: w.now()}
	if t := gjson.GetBytes(data, "task_id").String(); checkID(t) == nil && len(t) <= protocol.MaxIDLen {
		o.TaskID = t
	}
	w.log.Warn("invalid task", "entry", entryID, "request_id", reqID, "err", cause)
	now := w.now()
	run := protocol.NewRun(reqID, o.TaskID, w.cfg.WorkerID, "", now)
	_ = run.Fail(protocol.CodeInvalidTask, cause.Error(), now)
	doc, err := o.Encode()
	if err != nil {
		w.log.Error("encode output", "err", err)
		return
	}
	retry(w, func(c context.Context) (bool, error) {
		return w.rdb.FinishTask(c, rdb.Finish{RequestID: reqID, OutputStream: outStream, Output: doc,
			Run: run.Hash(), InputStream: stream, Group: group, EntryID: entryID})
	})
	w.pushLifecycle(protocol.EventTaskFailed, reqID, o.TaskID, map[string]any{"code": protocol.CodeInvalidTask})
}

// reportProgress records a progress report of the run that token belongs
// to: one more step on the run, and a Progress event on its output stream.
func (w *Worker) reportProgress(token string, rep protocol.ProgressReport) (int, error) {
	if !w.cfg.AllowedCommands.Allows(protocol.ProgressCommand) {
		return 0, errForbidden
	}
	w.mu.Lock()
	cur := w.cur
	if cur == nil || !tokenEqual(token, cur.token) {
		w.mu.Unlock()
		return 0, errNoRun
	}
	if err := cur.run.Step(rep.Step, w.now()); err != nil {
		w.mu.Unlock()
		return 0, errNoRun
	}
	n := cur.run.StepsCompleted
	w.mu.Unlock()
	w.pushRun(cur.run)
	w.pushProgress(cur, rep.Step, rep.ProgressPct, rep.Output, "")
	return n, nil
}

func (w *Worker) pushProgress(cur *current, step string, pct *int, output, level string) {
	if cur.output == "" { // a run of the wrapper's own (a session summary)
		return
	}
	w.mu.Lock()
	n := cur.run.StepsCompleted
	w.mu.Unlock()
	p := protocol.Progress{WorkerID: w.cfg.WorkerID, RequestID: cur.task.RequestID, TaskID: cur.task.TaskID,
		Step: step, ProgressPct: pct, Output: w.redact.Redact(output), Level: level, StepsCompleted: n, Timestamp: w.now()}
	doc, err := p.Encode()
	if err != nil {
		return
	}
	stream := cur.output
	w.out.Push("progress", func(ctx context.Context) error { return w.rdb.XAdd(ctx, stream, doc) })
}

func (w *Worker) pushRun(run *protocol.Run) {
	w.mu.Lock()
	fields := run.Hash()
	w.mu.Unlock()
	key := w.cfg.Keys.Run(run.RequestID)
	w.out.Push("run "+string(run.State), func(ctx context.Context) error { return w.rdb.HSet(ctx, key, fields) })
}

func (w *Worker) pushStatus(fields map[string]any) {
	w.mu.Lock()
	fields[protocol.StatusFieldState] = string(w.machine.State)
	w.mu.Unlock()
	fields[protocol.StatusFieldUpdatedAt] = protocol.FormatTime(w.now())
	key := w.cfg.Keys.Status(w.cfg.WorkerID)
	w.out.Push("status", func(ctx context.Context) error { return w.rdb.HSet(ctx, key, fields) })
}

func (w *Worker) pushLifecycle(ev protocol.Event, reqID, taskID string, detail map[string]any) {
	l := protocol.Lifecycle{WorkerID: w.cfg.WorkerID, Event: ev, Source: protocol.SourceWrapper,
		Timestamp: w.now(), RequestID: reqID, TaskID: taskID, Detail: detail}
	doc, err := l.Encode()
	if err != nil {
		w.log.Error("encode lifecycle event", "event", ev, "err", err)
		return
	}
	key := w.cfg.Keys.Lifecycle()
	w.out.Push("lifecycle "+string(ev), func(ctx context.Context) error { return w.rdb.XAdd(ctx, key, doc) })
}

// transition moves the worker's state machine and writes the status hash.
func (w *Worker) transition(to protocol.WorkerState, reason string) {
	w.mu.Lock()
	_, err := w.machine.Transition(to, reason, w.now())
	w.mu.Unlock()
	if err != nil {
		w.log.Error("worker state", "err", err)
		return
	}
	w.pushStatus(map[string]any{})
}

func (w *Worker) healthReport() map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := map[string]any{"worker_id": w.cfg.WorkerID, "state": w.machine.State, "tasks_completed": w.tasksDone,
		"events_pending": w.out.Len(), "events_dropped": w.out.Dropped()}
	if w.cur != nil {
		h["request_id"] = w.cur.task.RequestID
	}
	return h
}

// retry calls f until it succeeds, with backoff: for writes that must not
// be lost while Redis is down.
func retry[T any](w *Worker, f func(context.Context) (T, error)) T {
	b := newBackoff()
	for {
		v, err := f(context.Background())
		if err == nil {
			return v
		}
		w.log.Warn("redis call failed, retrying", "err", err, "backoff", b.d)
		b.wait(context.Background())
	}
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 100 * time.Millisecond} }

func (b *backoff) reset() { b.d = 100 * time.Millisecond }

func (b *backoff) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(b.d):
	}
	b.d = min(b.d*2, 5*time.Second)
}

// ForwardSignal sends sig to the running agent's process group, if any.
func (w *Worker) ForwardSignal(sig syscall.Signal) {
	w.mu.Lock()
	pid := 0
	if w.cur != nil {
		pid = w.cur.agentPID
	}
	w.mu.Unlock()
	if pid > 0 {
		_ = syscall.Kill(-pid, sig)
	}
}

// Fail records that the wrapper cannot work (status failed, a failed
// lifecycle event), as far as Redis answers within timeout.
func (w *Worker) Fail(cause error, exitCode int, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	now := w.now()
	msg := w.redact.Redact(cause.Error())
	_ = w.rdb.HSet(ctx, w.cfg.Keys.Status(w.cfg.WorkerID), map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerFailed), protocol.StatusFieldError: msg,
		protocol.StatusFieldExitCode: exitCode, protocol.StatusFieldUpdatedAt: protocol.FormatTime(now)})
	l := protocol.Lifecycle{WorkerID: w.cfg.WorkerID, Event: protocol.EventFailed, Source: protocol.SourceWrapper,
		Timestamp: now, Detail: map[string]any{"error": msg, "exit_code": exitCode}}
	if doc, err := l.Encode(); err == nil {
		_ = w.rdb.XAdd(ctx, w.cfg.Keys.Lifecycle(), doc)
	}
}

// Close releases the Redis connections.
func (w *Worker) Close() error { return w.rdb.Close() }
