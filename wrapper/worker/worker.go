// Package worker is the worker-wrapper's core: it reads tasks from Redis,
// runs the agent for each, and publishes what happens as the protocol says.
// Worker is the composition root: it builds the parts below and wires
// them. A task entry's path, file by file:
//
//   - input.go: the read loop, and routing each entry by its type: a task
//     to task.go (or, on the developer queue, to the worker holding its
//     project's session: affinity.go); a cancel, a steering message or a
//     permission reply to its part; the input's follower and look-ahead,
//     which see those before their turn;
//   - queue.go: what is read next (own pending entries first; the
//     developer queues by priority; nothing new while degraded);
//   - recover.go: a panic in one entry's handling ends that entry, not
//     the worker; an output that does not validate is still answered;
//   - task.go: one task's run, admit → execute → finish (taskRun), and the
//     task in flight (current);
//   - agentrun.go: how the agent runs for a task (its spec, the persistent
//     process or a process of its own, the turns of steering messages),
//     and the wrapper's own turns;
//   - output.go: the Output document of a task, and of an entry rejected;
//   - publisher.go: everything told to Redis: events through the Outbox,
//     a task's output stored with its run and usage, the retry policy.
//
// The parts a task's run asks, each owning its state (and its lock):
//
//   - state.go: the worker's state machine and the task in flight;
//     transitions.go: each change published (lifecycle, history, status),
//     and the health (first heartbeat, task failures, health check);
//   - cancel.go: cancels seen, and a task's interrupt (cancels,
//     interruptible); winddown.go: a cancelled task's agent winding down
//     after its output (windDown);
//   - steer.go: steering messages (steering, taskSteer);
//   - approve.go: permissions asked of the task's owner (approvals);
//   - cost.go: the cost of an agent that reports none, priced from the
//     proxy's meter, and the live guard of its max_budget_usd (spending);
//   - heal.go: the model API's refusals and rate limits (healer);
//   - sessions.go: which agent session a task runs in; answers.go: a task
//     that answers a run continues its session;
//   - budget.go: the project's budget, before and after a task;
//   - persistent.go, recycle.go: the agent process kept across tasks;
//   - oom.go: the cgroup's OOM kill counter.
//
// The worker's frame:
//
//   - config.go: the configuration, from the environment;
//   - lifecycle.go: start, shutdown, Terminate and Fail;
//   - agentcmd.go: the agent's adapter settings, environment and
//     workspace (what differs between CLIs is their adapter's, package
//     agent);
//   - secrets.go: what the agent may not see, and the model API proxy it
//     gets instead of the key;
//   - mcp.go: the MCP servers' settings, read and kept secret;
//   - permissions.go: the guard of the agent's shell calls
//     (ALLOWED_COMMANDS);
//   - heartbeat.go, progress.go: the heartbeat, and the progress and
//     health endpoint;
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

	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Worker reads tasks and runs the agent for each. It builds the parts of
// the pipeline and wires them; each owns its state.
type Worker struct {
	cfg      Config
	agent    agent.Adapter // the agent CLI's adapter: everything the wrapper knows of that CLI
	rdb      *rdb.RDB
	log      *slog.Logger
	starter  agent.Starter
	redact   *Redactor
	pub      *publisher
	sessions SessionPolicy
	now      func() time.Time
	environ  []string

	state     *workerState
	cancels   *cancels
	steering  *steering
	approvals *approvals
	spend     *spending
	heal      *healer
	terminate *terminator

	// persist is the persistent agent (AGENT_PERSISTENT), nil otherwise;
	// owned by the task loop's goroutine.
	persist *persistentAgent
	// wind is a cancelled task's agent run still winding down (winddown.go).
	wind windDown

	progress     atomic.Pointer[progressServer] // set once by Run
	shutdownOnce sync.Once                      // beginShutdown
	// stopLoop ends the task loop (set by Run); adoption is the worker
	// an adopt document made this wrapper become (adopt.go).
	stopLoop atomic.Pointer[context.CancelFunc]
	adoption atomic.Pointer[Adoption]
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
	r, err := rdb.Open(cfg.RedisURL, cfg.RedisSocket, cfg.Keys)
	if err != nil {
		return nil, err
	}
	r.StreamMaxLen, r.Wait = cfg.StreamMaxLen, cfg.RedisWait
	ad, err := agent.New(cfg.AgentType, cfg.agentSettings())
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, agent: ad, rdb: r, log: opts.Logger, starter: opts.Starter, sessions: opts.Sessions,
		now: opts.Now, environ: opts.Environ, terminate: newTerminator()}
	if w.log == nil {
		w.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	w.log = w.log.With("worker_id", cfg.WorkerID)
	if w.starter == nil {
		w.starter = agent.DirectStarter{}
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.environ == nil {
		w.environ = os.Environ()
	}
	w.redact = NewRedactor(append(slices.Clone(w.environ), cfg.mcpSecrets()...), cfg.RedisURL)
	if w.sessions == nil {
		if cfg.SessionPolicy == "new" {
			w.sessions = NewSessions{}
		} else {
			w.sessions = NewProjectSessions(SessionDeps{Store: r, Run: w.runOwnTurn, Now: w.now, Log: w.log,
				AgentType: cfg.AgentType, Agent: ad, WorkerID: cfg.WorkerID, Redact: w.redact.Redact, Files: cfg.sessionFiles(r, w.log)}, cfg.Sessions)
		}
	}
	switch {
	case cfg.Persistent && ad.Caps().OneShotMCP && len(cfg.MCPServers) > 0:
		// The agent's MCP check reads its run for one task (Droid: its
		// refusal to start under --add-tools, its init line's tools).
		w.log.Warn("AGENT_PERSISTENT: a " + ad.Name() + " worker with MCP servers runs one process per task")
	case cfg.Persistent && ad.Caps().NoPersistent != "":
		// FromEnv refuses it; a Config made otherwise runs per task.
		w.log.Warn("AGENT_PERSISTENT: a " + ad.Name() + " worker runs one process per task: " + ad.Caps().NoPersistent)
	case cfg.Persistent:
		w.persist = &persistentAgent{log: w.log, argv: ad.PersistentArgv, input: ad.Input,
			opens: ad.Caps().OpensSession, recycleTasks: cfg.RecycleTasks, recycleRSS: cfg.RecycleRSS}
	}
	w.wire()
	return w, nil
}

// wire builds the parts that own the worker's state.
func (w *Worker) wire() {
	w.pub = newPublisher(w.rdb, w.cfg, w.log, w.now, w.redact)
	w.state = newWorkerState(w.cfg.WorkerID, w.now, w.publishTransition)
	w.cancels = &cancels{state: w.state, log: w.log, now: w.now}
	w.steering = &steering{state: w.state, pub: w.pub, log: w.log, now: w.now, noResume: w.agent.Caps().NoResume}
	w.approvals = &approvals{pub: w.pub, log: w.log, redact: w.redact, now: w.now, workerID: w.cfg.WorkerID, timeout: w.cfg.ApprovalTimeout}
	w.spend = &spending{state: w.state, agent: w.agent, prices: w.cfg.Prices, pub: w.pub, log: w.log, direct: w.unmetered}
	w.heal = &healer{state: w.state, pub: w.pub, log: w.log, now: w.now}
}

// ProgressURL returns the URL of the progress endpoint, once Run has
// started it.
func (w *Worker) ProgressURL() string {
	if p := w.progress.Load(); p != nil {
		return p.url
	}
	return ""
}

// Close releases the Redis connections.
func (w *Worker) Close() error { return w.rdb.Close() }
