package spawner

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

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
	poolUseDesc  = prometheus.NewDesc("agentvisor_pool_utilization", "A warm pool's allocated workers over its warm and allocated ones (0 when it has none).",
		[]string{"pool"}, nil)
	poolSizeDesc = prometheus.NewDesc("agentvisor_pool_workers", "A pool's workers, by pool and pool state (warm: ready; allocated; member: of its fixed size).",
		[]string{"pool", "pool_state"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{workersDesc, queueDesc, creatingDesc, retiringDesc, oldestDesc, scrapeDesc, poolUseDesc, poolSizeDesc} {
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
		if !protocol.Health(health).Valid() {
			health = string(protocol.HealthUnknown)
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
	if err := c.collectPools(ctx, ch); err != nil {
		failed = 1
	}
}

// collectPools sends every published pool's utilisation and workers.
func (c *stateCollector) collectPools(ctx context.Context, ch chan<- prometheus.Metric) error {
	pools, err := listPools(ctx, c.r)
	if err != nil {
		return err
	}
	for _, p := range pools {
		ch <- prometheus.MustNewConstMetric(poolUseDesc, prometheus.GaugeValue, p.Utilization, p.Name)
		for state, n := range map[string]int{protocol.PoolWarm: p.Warm, protocol.PoolAllocated: p.Allocated, protocol.PoolMember: p.Members} {
			ch <- prometheus.MustNewConstMetric(poolSizeDesc, prometheus.GaugeValue, float64(n), p.Name, state)
		}
	}
	return nil
}
