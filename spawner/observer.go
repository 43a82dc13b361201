package spawner

import (
	"sync/atomic"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

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

// poolAllocated records how long a create of a pool's spec waited for its
// worker: source is "warm" (allocated) or "cold" (made fresh).
func (o *observer) poolAllocated(pool, source string, wait time.Duration) {
	if o.m == nil {
		return
	}
	o.m.poolWait.WithLabelValues(pool, source).Observe(wait.Seconds())
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
func (o *observer) leaderJobs(e *env) []component {
	if o.m == nil {
		return nil
	}
	return []component{&streamMetrics{env: e, m: o.m}}
}

// healthChecked records one round of the health check.
func (o *observer) healthChecked(d time.Duration) {
	if o == nil || o.m == nil {
		return
	}
	o.m.healthSeconds.Observe(d.Seconds())
}

// commandExpired counts a command dropped because its deadline passed.
func (o *observer) commandExpired(action protocol.Action) {
	if o == nil || o.m == nil {
		return
	}
	o.m.expired.WithLabelValues(string(action)).Inc()
}
