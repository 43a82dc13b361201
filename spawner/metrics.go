package spawner

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Metrics are the worker-manager's Prometheus metrics (docs/operations.md, "Operations: metrics, alerts, manager state",
// lists each with its labels). Control-plane figures (creates, wakes,
// GC, Redis errors) are observed where they happen; worker-side figures
// (tasks, tokens, cost, crashes, health) come from the lifecycle and
// output streams the leader reads, never from inside a container; the
// workers' states and the queues are read from Redis at each scrape.
// Every label has a bounded set of values: projects beyond MaxProjects
// are counted as "_other".
type Metrics struct {
	Registry *prometheus.Registry

	creates        *prometheus.CounterVec   // outcome
	createSeconds  *prometheus.HistogramVec // outcome
	wakeSeconds    prometheus.Histogram
	wakeFailures   prometheus.Counter
	gcRemoved      prometheus.Counter
	gcRuns         *prometheus.CounterVec // outcome
	redisErrors    *prometheus.CounterVec // command
	leases         *prometheus.GaugeVec   // lease
	reconciles     prometheus.Counter
	reconcileFixes *prometheus.CounterVec // fix

	tasks          *prometheus.CounterVec   // agent, status, code
	taskSeconds    *prometheus.HistogramVec // agent, status
	tokens         *prometheus.CounterVec   // project, type
	cost           *prometheus.CounterVec   // project
	resumeFailures prometheus.Counter
	sessions       *prometheus.CounterVec
	healthSeconds  prometheus.Histogram
	crashToOutput  prometheus.Histogram
	lifecycle      *prometheus.CounterVec   // event
	heartbeatsMiss *prometheus.CounterVec   // event (degraded, dead)
	stateSeconds   *prometheus.HistogramVec // state, health: time spent in a state before it changed
	transitions    *prometheus.CounterVec   // from, to
	refusals       *prometheus.CounterVec   // kind
	imageBuilds    *prometheus.CounterVec   // agent, outcome
	buildSeconds   *prometheus.HistogramVec // agent
	poolWait       *prometheus.HistogramVec // pool, source
	expired        *prometheus.CounterVec   // action

	maxProjects int
	mu          sync.Mutex
	projects    map[string]bool // projects with series of their own
}

// NewMetrics makes the metrics on a registry of their own (with the Go
// runtime's and the process's collectors), and the scrape-time collector
// of the workers and queues of this key prefix.
func NewMetrics(rc redis.Cmdable, keys protocol.Keys, maxProjects int) *Metrics {
	reg := prometheus.NewRegistry()
	f := func(c prometheus.Collector) prometheus.Collector { reg.MustRegister(c); return c }
	durations := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	m := &Metrics{Registry: reg, maxProjects: maxProjects, projects: map[string]bool{}}
	m.creates = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_creates_total",
		Help: "Creates executed by this manager, by outcome (ok or the error code)."}, []string{"outcome"})).(*prometheus.CounterVec)
	m.createSeconds = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentvisor_create_duration_seconds",
		Help: "Create latency: admission, image, container, start (a queued create's wait included).", Buckets: durations},
		[]string{"outcome"})).(*prometheus.HistogramVec)
	m.wakeSeconds = f(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentvisor_wake_duration_seconds",
		Help:    "Unpause of a paused worker that has a task waiting (wake-on-input), on the leader.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}})).(prometheus.Histogram)
	m.wakeFailures = f(prometheus.NewCounter(prometheus.CounterOpts{Name: "agentvisor_wake_failures_total",
		Help: "Wake-on-input unpauses that failed."})).(prometheus.Counter)
	m.gcRemoved = f(prometheus.NewCounter(prometheus.CounterOpts{Name: "agentvisor_gc_images_removed_total",
		Help: "Worker images removed by the image GC (in a dry run: that it would have removed)."})).(prometheus.Counter)
	m.gcRuns = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_gc_runs_total",
		Help: "Image GC collections, by outcome (ok, error)."}, []string{"outcome"})).(*prometheus.CounterVec)
	m.redisErrors = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_redis_errors_total",
		Help: "Redis commands of this manager that failed (a nil reply is no error), by command name."}, []string{"command"})).(*prometheus.CounterVec)
	m.leases = f(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "agentvisor_leases_held",
		Help: "1 for each named lease this manager holds (leader)."}, []string{"lease"})).(*prometheus.GaugeVec)
	m.reconciles = f(prometheus.NewCounter(prometheus.CounterOpts{Name: "agentvisor_reconciles_total",
		Help: "Reconciliation passes completed by this manager."})).(prometheus.Counter)
	m.reconcileFixes = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_reconcile_fixes_total",
		Help: "What reconciliation fixed, by fix: orphan_removed (a container without a worker: a leak), missing_retired, state_fixed, started, exited_retired, retirement_taken_over."},
		[]string{"fix"})).(*prometheus.CounterVec)
	m.tasks = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_tasks_total",
		Help: "Task outputs, by agent, status (complete, blocked, failed) and error code (\"\" unless failed)."},
		[]string{"agent", "status", "code"})).(*prometheus.CounterVec)
	m.taskSeconds = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentvisor_task_duration_seconds",
		Help: "Task duration as the wrapper reports it (duration_ms of the output).", Buckets: durations},
		[]string{"agent", "status"})).(*prometheus.HistogramVec)
	m.tokens = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_tokens_total",
		Help: "Model tokens of task outputs and of model calls outside any output (usage events: summary and wind-down turns), by project (at most METRICS_MAX_PROJECTS, then _other) and type (input, output, cache_read, cache_creation)."},
		[]string{"project", "type"})).(*prometheus.CounterVec)
	m.cost = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_cost_usd_total",
		Help: "Model cost in US dollars, counted as the tokens, by project (bounded as for tokens)."}, []string{"project"})).(*prometheus.CounterVec)
	m.resumeFailures = f(prometheus.NewCounter(prometheus.CounterOpts{Name: "agentvisor_resume_failures_total",
		Help: "Task outputs that failed with RESUME_FAILED."})).(prometheus.Counter)
	m.sessions = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_task_sessions_total",
		Help: "Task outputs by how the wrapper chose their session (the output's session.reason: continued, no_session, held_by_other_worker, context_overflow, stale, force_new_session, resume_failed, reset_context, answers, retry; other). held_by_other_worker is an affinity miss: the project's session was on another worker."},
		[]string{"reason"})).(*prometheus.CounterVec)
	m.healthSeconds = f(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentvisor_health_check_duration_seconds",
		Help:    "One round of the leader's health check: every running worker's status and heartbeat read and judged.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}})).(prometheus.Histogram)
	m.crashToOutput = f(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentvisor_crash_to_output_seconds",
		Help:    "From a worker's died or oom event to the failed output of its task in flight.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})).(prometheus.Histogram)
	m.lifecycle = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_lifecycle_events_total",
		Help: "Lifecycle events, by event (the protocol's fixed set)."}, []string{"event"})).(*prometheus.CounterVec)
	m.heartbeatsMiss = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_heartbeats_missed_total",
		Help: "Workers judged on missed heartbeats: degraded (stale probes) or dead (heartbeat expired)."}, []string{"event"})).(*prometheus.CounterVec)
	m.stateSeconds = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentvisor_worker_state_duration_seconds",
		Help:    "Time a worker spent in a state (with a health) before it changed, from its state_changed events, by state and health.",
		Buckets: []float64{.1, .5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600}}, []string{"state", "health"})).(*prometheus.HistogramVec)
	m.transitions = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_worker_transitions_total",
		Help: "Worker state changes (state_changed events), by from and to (a state, or a health for a change of health alone)."},
		[]string{"from", "to"})).(*prometheus.CounterVec)
	m.refusals = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_refusals_total",
		Help: "What a worker refused its agent (the warning events with refused set), by kind: network (a connection a sealed worker's gateway refused: off its egress allowlist), model (a model call refused: by the gateway, not the worker's token; by the wrapper's proxy, outside a task, past a budget, or not the model API), connections (a connection over a sealed worker's GATEWAY_MAX_CONNS), command (a tool call ALLOWED_COMMANDS does not allow), progress (a progress call refused)."},
		[]string{"kind"})).(*prometheus.CounterVec)
	m.imageBuilds = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_image_builds_total",
		Help: "Worker images built (a create whose image was missing), by agent and outcome (ok, error)."}, []string{"agent", "outcome"})).(*prometheus.CounterVec)
	m.buildSeconds = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentvisor_image_build_duration_seconds",
		Help: "Worker image builds, by agent.", Buckets: []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}}, []string{"agent"})).(*prometheus.HistogramVec)
	m.poolWait = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentvisor_pool_allocation_wait_seconds",
		Help:    "How long a create of a pool's spec waited for its worker, by pool and source (warm: taken from the warm set; cold: none was ready, made fresh).",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 120}}, []string{"pool", "source"})).(*prometheus.HistogramVec)
	m.expired = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_commands_expired_total",
		Help: "Commands not carried out because their sender's deadline passed (answered COMMAND_EXPIRED), by action."}, []string{"action"})).(*prometheus.CounterVec)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&stateCollector{r: rdb.New(rc, keys)})
	return m
}

// project bounds the project label.
func (m *Metrics) project(p string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.projects[p] {
		return p
	}
	if len(m.projects) < m.maxProjects {
		m.projects[p] = true
		return p
	}
	return "_other"
}

// ImageBuilt is an Images.OnBuild that counts builds.
func (m *Metrics) ImageBuilt(agent protocol.AgentType, took time.Duration, err error) {
	oc := "ok"
	if err != nil {
		oc = "error"
	}
	m.imageBuilds.WithLabelValues(string(agent), oc).Inc()
	m.buildSeconds.WithLabelValues(string(agent)).Observe(took.Seconds())
}

// stateChanged counts a state_changed event's transition (its detail, a
// protocol.TransitionRecord) and the time spent in the state it left.
// Labels outside the protocol's states and healths are "unknown".
func (m *Metrics) stateChanged(detail map[string]any) {
	str := func(k string) string { v, _ := detail[k].(string); return v }
	state := func(v string) string {
		if protocol.WorkerState(v).Valid() {
			return v
		}
		return "unknown"
	}
	health := func(v string) string {
		if protocol.Health(v).Valid() {
			return v
		}
		return "unknown"
	}
	from, to := state(str("from")), state(str("to"))
	fromHealth, toHealth := health(str("from_health")), health(str("to_health"))
	if from == to && fromHealth != toHealth {
		from, to = fromHealth, toHealth
	}
	m.transitions.WithLabelValues(from, to).Inc()
	if ms, ok := detail["in_previous_ms"].(float64); ok && ms >= 0 {
		m.stateSeconds.WithLabelValues(state(str("from")), fromHealth).Observe(ms / 1000)
	}
}
