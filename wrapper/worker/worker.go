// Package worker is the worker-wrapper's core: it reads tasks from Redis,
// runs the agent for each, and publishes what happens as the protocol says.
// One file per stage of that pipeline:
//
//   - config.go: the configuration, from the environment;
//   - lifecycle.go: start, shutdown, the worker's state and status hash;
//   - input.go: reading task entries (own pending entries first);
//   - runner.go: one task from its entry to its stored output;
//   - output.go: the Output document of a task;
//   - agentcmd.go: the agents' command lines and environment;
//   - secrets.go: what the agent may not see, and the model API proxy it
//     gets instead of the key;
//   - cost.go: the cost of an agent that reports none, priced from the
//     proxy's meter, and the live guard of its max_budget_usd;
//   - cancel.go: cancel documents, seen on the input by the task loop, by a
//     follower outside the group and by a look-ahead;
//   - persistent.go: the Claude process kept across tasks;
//   - sessions.go: which agent session a task runs in;
//   - publisher.go: events to Redis, and the retry policy of writes;
//   - heartbeat.go, progress.go: the heartbeat, and the progress and
//     health endpoint;
//   - permissions.go: ALLOWED_COMMANDS as each CLI's permission flags, the
//     guard of Droid's shell calls, refusals published as warnings;
//   - redact.go: redaction of the structured fields of an output.
package worker

import (
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Worker reads tasks and runs the agent for each. It wires the stages of
// the pipeline; each lives in its own file.
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

	// persist is the persistent agent (AGENT_PERSISTENT), nil otherwise;
	// owned by the task loop's goroutine.
	persist *persistentAgent

	progress *progressServer // set once by Run, under mu

	// terminate ends the running agent at once (the shutdown grace ran
	// out, or a second signal came).
	terminateOnce sync.Once
	terminateCh   chan struct{}
	shutdownOnce  sync.Once // beginShutdown

	mu        sync.Mutex // guards the fields below
	machine   *protocol.WorkerMachine
	cur       *current // the task in flight; nil when idle
	tasksDone int64
	stopping  bool                  // shutdown began: no new task starts
	cancels   map[string]cancelNote // cancels seen, by request id (cancel.go)
	// seenMessages: steering message entries taken (request id in
	// reason); messages: those for tasks not started yet (steer.go).
	seenMessages map[string]cancelNote
	messages     map[string][]string
	permissions  map[string]*pendingPermission // asked, not answered yet, by permission id (approve.go)
	// ownTurns counts the wrapper's own agent runs in progress (a
	// retiring session's summary): their model calls are not the task's
	// (cost.go). unpriced: the models logged as having no price.
	ownTurns int
	unpriced map[string]bool
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
	r.StreamMaxLen, r.Wait = cfg.StreamMaxLen, cfg.RedisWait
	ad, err := agent.New(cfg.AgentType, cfg.agentSettings())
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, agent: ad, rdb: r, log: opts.Logger, starter: opts.Starter, sessions: opts.Sessions,
		now: opts.Now, environ: opts.Environ, terminateCh: make(chan struct{})}
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
				AgentType: cfg.AgentType, Agent: ad, WorkerID: cfg.WorkerID, Redact: w.redact.Redact}, cfg.Sessions)
		}
	}
	switch {
	case cfg.Persistent && ad.Caps().OneShotMCP && len(cfg.MCPServers) > 0:
		// The agent's MCP check reads its run for one task (Droid: its
		// refusal to start under --add-tools, its init line's tools).
		w.log.Warn("AGENT_PERSISTENT: a " + ad.Name() + " worker with MCP servers runs one process per task")
	case cfg.Persistent:
		w.persist = &persistentAgent{log: w.log, argv: ad.PersistentArgv, input: ad.Input,
			opens: ad.Caps().OpensSession, recycleTasks: cfg.RecycleTasks, recycleRSS: cfg.RecycleRSS}
	}
	w.pub = newPublisher(r, cfg, w.log, w.now)
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

// Close releases the Redis connections.
func (w *Worker) Close() error { return w.rdb.Close() }
