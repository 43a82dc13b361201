// Package worker is the worker-wrapper's core: it reads tasks from Redis,
// runs the agent for each, and publishes what happens as the protocol says.
// Worker is the composition root: wire (worker.go) builds each part from
// what it needs, Run (lifecycle.go) starts and stops them in a written
// order. A task entry's way, stage by stage, each a type of its own:
//
//   - read: input (input.go, queue.go) reads the input through the
//     consumer group (own pending entries first; the developer queues by
//     priority; nothing new while degraded), and follows the input
//     outside the group for control documents;
//   - route: router (route.go) hands each entry to what its type is for:
//     a task to tasks (or, on the developer queue, to the worker holding
//     its project's session: affinity, affinity.go), a cancel, a steering
//     message or a permission reply to controls, an adopt document to the
//     adopter (adopt.go); recover.go is its panic boundary (a panic in
//     one entry's handling ends that entry, not PID 1);
//   - run: tasks (task.go) runs one task, admit → execute → finish
//     (taskRun), with its attempts (retry.go), its project's budget
//     (budget.go), the run it answers (answers.go) and its git worktree
//     and pushed change around the attempts (git.go); the agent's runs
//     are agentRunner's (agentrun.go: the spec, the persistent process or
//     a process of its own, the steering turns, the wrapper's own turns;
//     winddown.go: a cancelled task's agent winding down after its
//     output); outputs (output.go) builds the Output documents;
//   - publish: publisher (publisher.go) is everything told to Redis:
//     events through the Outbox (outbox.go), a task's output stored once
//     with its run and usage, bounded by the shutdown (terminator.final).
//
// The parts the stages ask, each owning its state (and its lock):
//
//   - state.go: the worker's state machine and the task in flight
//     (workerState, current); transitions.go: statusReporter publishes
//     each change (lifecycle, history, status hash, idle set) and asks
//     for pauses; heartbeat.go: heartbeater, and the health it proves;
//   - cancel.go: cancels seen, and a task's interrupt (cancels,
//     interruptible); steer.go: steering messages (steering, taskSteer);
//     approve.go: permissions asked of the task's owner (approvals);
//   - cost.go: the cost of an agent that reports none, priced from the
//     proxy's meter, and the live guard of its max_budget_usd (spending);
//     heal.go: the model API's refusals and rate limits (healer);
//   - sessions.go, sessionfiles.go: which agent session a task runs in,
//     and the session's files kept in Redis (SessionPolicy);
//   - persistent.go, recycle.go: the agent process kept across tasks
//     (persistentAgent, owned by agentRunner); oom.go: the cgroup's OOM
//     kill counter.
//
// The worker's frame:
//
//   - config.go: the configuration, from the environment;
//   - lifecycle.go: Run (start, shutdown), Terminate, Fail;
//   - agentcmd.go: the agent's adapter settings, environment and
//     workspace (what differs between CLIs is their adapter's, package
//     agent);
//   - secrets.go: what the agent may not see, and the model API proxy it
//     gets instead of the key;
//   - mcp.go: the MCP servers' settings, read and kept secret;
//   - permissions.go: the guard of the agent's shell calls
//     (ALLOWED_COMMANDS); progress.go: the progress and health endpoint;
//   - redact.go: redaction of what leaves the container.
package worker

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Worker reads tasks and runs the agent for each. It builds the stages of
// the pipeline and the parts they ask (wire), each owning its state, and
// runs them (lifecycle.go): it serves as nobody's shared state.
type Worker struct {
	cfg     Config // Run completes it (the model API proxy, the egress front) before the first agent starts
	agent   agent.Adapter
	rdb     *rdb.RDB
	log     *slog.Logger
	redact  *Redactor
	now     func() time.Time
	environ []string

	// The pipeline: input → router → tasks (→ agents) → publisher.
	input  *input
	tasks  *tasks
	agents *agentRunner
	pub    *publisher
	// What the stages share: the worker's state, and who reports it.
	state  *workerState
	status *statusReporter
	beat   *heartbeater
	// The model API proxy's hooks (Run starts the proxy).
	spend *spending
	heal  *healer

	adopter      *adopter
	terminate    *terminator
	progress     atomic.Pointer[progressServer] // set once by Run
	shutdownOnce sync.Once                      // beginShutdown
}

// Options are the Worker's collaborators; zero values take defaults.
type Options struct {
	Logger  *slog.Logger
	Starter agent.Starter // the reaper, in production
	// Sweeper kills what a task's agent left running (the reaper, in
	// production); none when nil.
	Sweeper  Sweeper
	Sessions SessionPolicy
	Now      func() time.Time
	Environ  []string // the wrapper's environment (os.Environ())
}

// New returns a Worker for cfg. It does not touch Redis yet.
func New(cfg Config, opts Options) (*Worker, error) {
	r, err := rdb.Open(cfg.RedisURL, cfg.RedisSocket, cfg.Keys)
	if err != nil {
		return nil, err
	}
	r.StreamMaxLen, r.Wait = cfg.StreamMaxLen, cfg.RedisWait
	ad, err := agent.New(cfg.AgentType, cfg.agentSettings())
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, agent: ad, rdb: r, log: opts.Logger, now: opts.Now, environ: opts.Environ,
		terminate: newTerminator(finalGrace(cfg.KillGrace))}
	if w.log == nil {
		w.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	w.log = w.log.With("worker_id", cfg.WorkerID)
	if opts.Starter == nil {
		opts.Starter = agent.DirectStarter{}
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.environ == nil {
		w.environ = os.Environ()
	}
	w.redact = NewRedactor(append(slices.Clone(w.environ), cfg.mcpSecrets()...), cfg.RedisURL)
	w.wire(opts)
	return w, nil
}

// persistentAgentFor is the persistent agent of cfg (AGENT_PERSISTENT),
// nil when the worker runs one process per task.
func persistentAgentFor(cfg Config, ad agent.Adapter, log *slog.Logger) *persistentAgent {
	switch {
	case cfg.Persistent && ad.Caps().OneShotMCP && len(cfg.MCPServers) > 0:
		// The agent's MCP check reads its run for one task (Droid: its
		// refusal to start under --add-tools, its init line's tools).
		log.Warn("AGENT_PERSISTENT: a " + ad.Name() + " worker with MCP servers runs one process per task")
	case cfg.Persistent && ad.Caps().NoPersistent != "":
		// FromEnv refuses it; a Config made otherwise runs per task.
		log.Warn("AGENT_PERSISTENT: a " + ad.Name() + " worker runs one process per task: " + ad.Caps().NoPersistent)
	case cfg.Persistent:
		return &persistentAgent{log: log, argv: ad.PersistentArgv, input: ad.Input,
			opens: ad.Caps().OpensSession, recycleTasks: cfg.RecycleTasks, recycleRSS: cfg.RecycleRSS}
	}
	return nil
}

// wire builds the parts, each from what it needs, in the order they
// depend on each other: the publisher and the worker's state first, the
// parts a task's run asks, then the stages of the pipeline.
func (w *Worker) wire(opts Options) {
	cfg, ad, log, now := w.cfg, w.agent, w.log, w.now
	w.pub = newPublisher(publisherParams{rdb: w.rdb, keys: cfg.Keys, workerID: cfg.WorkerID, host: cfg.Host, log: log, now: now,
		redact: w.redact, runRetention: cfg.RunRetention, waitTimeout: cfg.RedisWait.Timeout, eventBuffer: cfg.EventBuffer,
		final: w.terminate.final})
	w.state = newWorkerState(cfg.WorkerID, now, func(tr protocol.WorkerTransition) { w.status.published(tr) })
	w.status = newStatusReporter(statusReporterParams{state: w.state, pub: w.pub, log: log, now: now, workerID: cfg.WorkerID,
		developer: cfg.Kind == protocol.KindDeveloper, pauseAfterOutput: cfg.PauseAfterOutput, controlStream: cfg.Keys.Control()})
	cooldown := cfg.DegradedCooldown
	if cooldown <= 0 {
		cooldown = protocol.DefaultHealthCooldown
	}
	w.beat = newHeartbeater(heartbeaterParams{rdb: w.rdb, key: cfg.Keys.Heartbeat(cfg.WorkerID), interval: cfg.HeartbeatInterval, cooldown: cooldown,
		workerID: cfg.WorkerID, state: w.state, status: w.status, log: log, now: now})

	ctl := &controls{
		cancels:  &cancels{state: w.state, log: log, now: now},
		steering: &steering{state: w.state, pub: w.pub, log: log, now: now, noResume: ad.Caps().NoResume},
		approvals: &approvals{pub: w.pub, log: log, redact: w.redact, now: now, workerID: cfg.WorkerID,
			timeout: cfg.ApprovalTimeout},
	}
	getenv := envLookup(w.environ)
	w.spend = &spending{state: w.state, agent: ad, prices: cfg.Prices, pub: w.pub, log: log, direct: func() string {
		if w.cfg.model.url != "" { // the proxy meters the calls
			return ""
		}
		return ad.Route(getenv).Direct
	}}
	w.heal = &healer{state: w.state, pub: w.pub, log: log, now: now}
	w.agents = newAgentRunner(agentRunnerParams{agent: ad, starter: opts.Starter, sweeper: opts.Sweeper, persist: persistentAgentFor(cfg, ad, log), spend: w.spend,
		heal: w.heal, approvals: ctl.approvals, pub: w.pub, terminate: w.terminate, usage: w.rdb, log: log, now: now,
		env: func(token string, task protocol.Task) []string {
			return w.cfg.AgentEnv(ad, w.environ, w.ProgressURL(), token, task)
		},
		workerID: cfg.WorkerID, workspace: cfg.Workspace, pty: cfg.PTY, taskTimeout: cfg.TaskTimeout,
		resultGrace: cfg.ResultGrace, killGrace: cfg.KillGrace, stallTimeout: cfg.StallTimeout})
	sessions := opts.Sessions
	if sessions == nil {
		if cfg.SessionPolicy == "new" {
			sessions = NewSessions{}
		} else {
			sessions = NewProjectSessions(SessionDeps{Store: w.rdb, Run: w.agents.ownTurn, Now: now, Log: log,
				AgentType: cfg.AgentType, Agent: ad, WorkerID: cfg.WorkerID, Redact: w.redact.Redact, Files: cfg.sessionFiles(w.rdb, log)}, cfg.Sessions)
		}
	}
	outs := outputs{workerID: cfg.WorkerID, agentType: cfg.AgentType, redact: w.redact, now: now}
	var rt *router // built last: it hands entries to the stages below
	w.input = newInput(inputParams{rdb: w.rdb, keys: cfg.Keys, kind: cfg.Kind, workerID: cfg.WorkerID, log: log,
		degraded: w.status.degraded, controls: ctl,
		serve: func(ctx context.Context, src taskSource, e *rdb.Entry) { rt.serve(ctx, src, e) }})
	w.tasks = newTasks(tasksParams{rdb: w.rdb, agents: w.agents, sessions: sessions, spend: w.spend, state: w.state, cancels: ctl.cancels,
		steering: ctl.steering, pub: w.pub, status: w.status, outputs: outs, terminate: w.terminate, lookAhead: w.input.lookAhead,
		log: log, now: now, workerID: cfg.WorkerID, project: cfg.Project, agentType: cfg.AgentType, caps: ad.Caps(), taskTimeout: cfg.TaskTimeout,
		retry: cfg.Retry, jsonSchema: cfg.JSONSchema, disk: newDiskWatch(cfg.DiskLimit, cfg.Workspace),
		git: gitParams{workspace: cfg.Workspace, def: cfg.GitDefault, granter: w.gitGranter}})
	w.adopter = &adopter{log: log, redisURL: cfg.RedisURL, redisSocket: cfg.RedisSocket, workerID: cfg.WorkerID}
	aff := &affinity{rdb: w.rdb, keys: cfg.Keys, workerID: cfg.WorkerID, agentType: cfg.AgentType,
		on:    cfg.Kind == protocol.KindDeveloper && cfg.SessionPolicy != "new",
		fresh: time.Duration(protocol.HeartbeatTTLIntervals) * cfg.HeartbeatInterval, pub: w.pub, log: log, now: now}
	rt = newRouter(routerParams{pub: w.pub, status: w.status, state: w.state, controls: ctl, adopter: w.adopter, affinity: aff,
		tasks: w.tasks, outputs: outs, log: log, now: now, workerID: cfg.WorkerID})
}

// Adopted returns the worker this wrapper is to become, nil when none.
func (w *Worker) Adopted() *Adoption { return w.adopter.adoption.Load() }

// ProgressURL returns the URL of the progress endpoint, once Run has
// started it.
func (w *Worker) ProgressURL() string {
	if p := w.progress.Load(); p != nil {
		return p.url
	}
	return ""
}

// Close releases the Redis connections, and ends the retries of the
// writes that must not be lost, if any is left.
func (w *Worker) Close() error {
	w.terminate.endFinal()
	return w.rdb.Close()
}
