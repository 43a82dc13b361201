package spawner

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Metrics are the worker-manager's Prometheus metrics (README, "Metrics",
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
	crashToOutput  prometheus.Histogram
	lifecycle      *prometheus.CounterVec   // event
	heartbeatsMiss *prometheus.CounterVec   // event (degraded, dead)
	imageBuilds    *prometheus.CounterVec   // agent, outcome
	buildSeconds   *prometheus.HistogramVec // agent

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
		Help: "Model tokens of task outputs, by project (at most METRICS_MAX_PROJECTS, then _other) and type (input, output, cache_read, cache_creation)."},
		[]string{"project", "type"})).(*prometheus.CounterVec)
	m.cost = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_cost_usd_total",
		Help: "Model cost in US dollars of task outputs, by project (bounded as for tokens)."}, []string{"project"})).(*prometheus.CounterVec)
	m.resumeFailures = f(prometheus.NewCounter(prometheus.CounterOpts{Name: "agentvisor_resume_failures_total",
		Help: "Task outputs that failed with RESUME_FAILED."})).(prometheus.Counter)
	m.crashToOutput = f(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentvisor_crash_to_output_seconds",
		Help:    "From a worker's died or oom event to the failed output of its task in flight.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})).(prometheus.Histogram)
	m.lifecycle = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_lifecycle_events_total",
		Help: "Lifecycle events, by event (the protocol's fixed set)."}, []string{"event"})).(*prometheus.CounterVec)
	m.heartbeatsMiss = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_heartbeats_missed_total",
		Help: "Workers judged on missed heartbeats: degraded (stale probes) or dead (heartbeat expired)."}, []string{"event"})).(*prometheus.CounterVec)
	m.imageBuilds = f(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentvisor_image_builds_total",
		Help: "Worker images built (a create whose image was missing), by agent and outcome (ok, error)."}, []string{"agent", "outcome"})).(*prometheus.CounterVec)
	m.buildSeconds = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentvisor_image_build_duration_seconds",
		Help: "Worker image builds, by agent.", Buckets: []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}}, []string{"agent"})).(*prometheus.HistogramVec)
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

// RedisHook counts the failed commands of a go-redis client (add it with
// AddHook to the manager's client).
func (m *Metrics) RedisHook() redis.Hook { return redisHook{m} }

type redisHook struct{ m *Metrics }

func (h redisHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			h.m.redisErrors.WithLabelValues("dial").Inc()
		}
		return c, err
	}
}

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(ctx, cmd, err)
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(ctx, c, c.Err())
		}
		return err
	}
}

func (h redisHook) count(ctx context.Context, cmd redis.Cmder, err error) {
	if err == nil || errors.Is(err, redis.Nil) || ctx.Err() != nil {
		return
	}
	// Command names are the client's own: a bounded set.
	h.m.redisErrors.WithLabelValues(strings.ToLower(cmd.Name())).Inc()
}

// stateCollector reads the workers' states and the queues from Redis at
// each scrape: what they are now, whichever manager made them.
type stateCollector struct{ r *rdb.RDB }

var (
	workersDesc = prometheus.NewDesc("agentvisor_workers", "Workers of this key prefix, by state, health, agent and host (the manager that made them).",
		[]string{"state", "health", "agent", "host"}, nil)
	queueDesc    = prometheus.NewDesc("agentvisor_creation_queue_depth", "Creates waiting for a slot.", nil, nil)
	creatingDesc = prometheus.NewDesc("agentvisor_creates_admitted", "Creates holding a slot whose worker has not joined yet.", nil, nil)
	retiringDesc = prometheus.NewDesc("agentvisor_workers_retiring", "Workers being retired (their slot not yet free).", nil, nil)
	oldestDesc   = prometheus.NewDesc("agentvisor_oldest_task_running_seconds", "How long the oldest task in flight has run (0 when none).", nil, nil)
	scrapeDesc   = prometheus.NewDesc("agentvisor_state_scrape_errors", "1 when this scrape could not read the state from Redis.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{workersDesc, queueDesc, creatingDesc, retiringDesc, oldestDesc, scrapeDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	failed := 0.0
	defer func() { ch <- prometheus.MustNewConstMetric(scrapeDesc, prometheus.GaugeValue, failed) }()
	ids, err := c.r.Workers(ctx)
	if err != nil {
		failed = 1
		return
	}
	st, err := c.r.ReadFleetState(ctx, ids, []string{protocol.StatusFieldState, protocol.StatusFieldHealth,
		protocol.StatusFieldAgentType, protocol.StatusFieldHost, protocol.StatusFieldContainer,
		protocol.StatusFieldRequestID, protocol.StatusFieldTaskStarted})
	if err != nil {
		failed = 1
		return
	}
	type key struct{ state, health, agent, host string }
	counts := map[key]int{}
	oldest := 0.0
	for _, v := range st.Workers {
		s := func(i int) string { return v[i] }
		if started, err := protocol.ParseTime(s(6)); err == nil && s(5) != "" {
			oldest = max(oldest, time.Since(started).Seconds())
		}
		state := s(0)
		if s(4) == string(protocol.ContainerPaused) {
			state = string(protocol.WorkerPaused)
		}
		if !protocol.WorkerState(state).Valid() {
			state = "unknown"
		}
		health := s(1)
		if health != string(protocol.HealthHealthy) && health != string(protocol.HealthDegraded) {
			health = "unknown"
		}
		agent := s(2)
		if !protocol.AgentType(agent).Valid() {
			agent = "unknown"
		}
		counts[key{state, health, agent, s(3)}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(n), k.state, k.health, k.agent, k.host)
	}
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(st.Queue))
	ch <- prometheus.MustNewConstMetric(creatingDesc, prometheus.GaugeValue, float64(st.Creating))
	ch <- prometheus.MustNewConstMetric(retiringDesc, prometheus.GaugeValue, float64(st.Retiring))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, oldest)
}

// observer is the Spawner's link to its Metrics and to the manager state:
// every method is safe on the zero observer (no metrics).
type observer struct {
	m             *Metrics
	addr          string       // where /metrics listens, for the manager state
	lastReconcile atomic.Int64 // Unix ms of the last reconciliation
}

// UseMetrics makes the spawner record into m; addr is where they are
// served (shown in the manager state). Call it before Manager.Run.
func (s *Spawner) UseMetrics(m *Metrics, addr string) { s.obs.m, s.obs.addr = m, addr }

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	if pe := ProtocolError(err); pe != nil {
		return string(pe.Code)
	}
	return string(protocol.CodeInternalError)
}

func (o *observer) createDone(start time.Time, err error) {
	if o.m == nil {
		return
	}
	oc := outcome(err)
	o.m.creates.WithLabelValues(oc).Inc()
	o.m.createSeconds.WithLabelValues(oc).Observe(time.Since(start).Seconds())
}

func (o *observer) woken(start time.Time, err error) {
	if o.m == nil {
		return
	}
	if err != nil {
		o.m.wakeFailures.Inc()
		return
	}
	o.m.wakeSeconds.Observe(time.Since(start).Seconds())
}

func (o *observer) reconciled(now time.Time, rep ReconcileReport) {
	o.lastReconcile.Store(now.UnixMilli())
	if o.m == nil {
		return
	}
	o.m.reconciles.Inc()
	for fix, n := range map[string]int{"orphan_removed": rep.OrphansRemoved, "missing_retired": rep.MissingMarked,
		"state_fixed": rep.StatesFixed, "started": rep.Started, "exited_retired": rep.Exited, "retirement_taken_over": rep.TakenOver} {
		o.m.reconcileFixes.WithLabelValues(fix).Add(float64(n))
	}
}

func (o *observer) setLeases(held []string) {
	if o.m == nil {
		return
	}
	o.m.leases.Reset()
	o.m.leases.WithLabelValues(ctlplane.LeaderLease).Set(0)
	for _, l := range held {
		o.m.leases.WithLabelValues(l).Set(1)
	}
}

// leaderJobs are the metrics' components that run on the leader: the
// stream reader, so that each event is counted once per key prefix.
func (o *observer) leaderJobs(s *Spawner) []component {
	if o.m == nil {
		return nil
	}
	return []component{&streamMetrics{s: s, m: o.m}}
}

// run is the image GC's loop, counting its collections.
func (g *gcJob) run(ctx context.Context) {
	interval := g.gc.Interval
	if interval <= 0 {
		interval = 24 * time.Hour
	}
	every(ctx, interval, func(ctx context.Context) {
		rep, err := g.gc.Collect(ctx)
		if err != nil {
			g.gc.log().Warn("image gc failed", "err", err)
		}
		if m := g.s.obs.m; m != nil {
			m.gcRuns.WithLabelValues(outcome(err)).Inc()
			m.gcRemoved.Add(float64(len(rep.Removed)))
		}
	})
}

// streamMetrics reads the lifecycle stream and the output streams (as a
// Watcher: no consumer group, from the moment it starts) and counts what
// the workers report.
type streamMetrics struct {
	job
	s *Spawner
	m *Metrics
}

func (sm *streamMetrics) Start(ctx context.Context) { sm.start(ctx, sm.run) }

func (sm *streamMetrics) run(ctx context.Context) {
	died := map[string]time.Time{} // worker → its died/oom event; owned by this loop
	w := &client.Watcher{Redis: sm.s.rdb.C, Keys: sm.s.keys}
	for ctx.Err() == nil {
		err := w.Run(ctx, func(ev client.Event) { sm.count(ev, died) })
		if err != nil && ctx.Err() == nil {
			sm.s.log.Warn("metrics: reading the streams", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	var n int64
	for _, c := range ms {
		n = n*10 + int64(c-'0')
	}
	return time.UnixMilli(n)
}

func (sm *streamMetrics) count(ev client.Event, died map[string]time.Time) {
	m := sm.m
	switch {
	case ev.Lifecycle != nil:
		l := ev.Lifecycle
		if !protocol.Event(l.Event).Valid() {
			return
		}
		m.lifecycle.WithLabelValues(string(l.Event)).Inc()
		switch l.Event {
		case protocol.EventDied, protocol.EventOOM:
			if _, ok := died[l.WorkerID]; !ok {
				died[l.WorkerID] = entryTime(ev.ID)
			}
		case protocol.EventDegraded, protocol.EventDead:
			m.heartbeatsMiss.WithLabelValues(string(l.Event)).Inc()
		case protocol.EventRemoved:
			delete(died, l.WorkerID)
		}
	case ev.Output != nil:
		o := ev.Output
		agent := string(o.AgentType)
		if !o.AgentType.Valid() {
			agent = "unknown"
		}
		code := ""
		if o.Error != nil {
			code = string(o.Error.Code)
		}
		m.tasks.WithLabelValues(agent, string(o.Status), code).Inc()
		m.taskSeconds.WithLabelValues(agent, string(o.Status)).Observe(float64(o.DurationMS) / 1000)
		p := m.project(o.ProjectID)
		m.tokens.WithLabelValues(p, "input").Add(float64(o.Usage.Input))
		m.tokens.WithLabelValues(p, "output").Add(float64(o.Usage.Output))
		m.tokens.WithLabelValues(p, "cache_read").Add(float64(o.Usage.CacheRead))
		m.tokens.WithLabelValues(p, "cache_creation").Add(float64(o.Usage.CacheCreation))
		m.cost.WithLabelValues(p).Add(o.CostUSD)
		if code == string(protocol.CodeResumeFailed) {
			m.resumeFailures.Inc()
		}
		if t, ok := died[o.WorkerID]; ok && o.Status == protocol.StatusFailed {
			m.crashToOutput.Observe(max(entryTime(ev.ID).Sub(t).Seconds(), 0))
			delete(died, o.WorkerID)
		}
	}
}
