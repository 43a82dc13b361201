package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// component is a background job of the manager.
type component interface {
	Start(ctx context.Context)
	Stop()
}

// Leader holds a leader lease for this manager and, while it holds it,
// runs the components that must run once: once per host (health,
// wake-on-input, timeouts, reconciliation, volume and image GC: they act
// on its engine) under the host's lease, once per fleet (retention, warm
// pools, the metrics read from the streams) under LeaderLease. The lease is taken
// or renewed every third of LeaseTTL; a manager that cannot renew it
// stops its leader components before the lease can have passed to another
// (two thirds of a lease after its last renewal), and a dead leader's
// lease passes to another manager within one lease.
type Leader struct {
	job
	*env
	leases leases
	lease  string // ctlplane.LeaderLease, or a host's HostLeaderLease
	jobs   []component

	// Owned by the loop's goroutine.
	leading bool
	renewed time.Time // when the last successful renewal was sent
}

func newLeader(e *env, l leases, lease string, jobs []component) *Leader {
	return &Leader{env: e, leases: l, lease: lease, jobs: jobs}
}

// leases are the named leases this manager process takes, as its
// instance (its MANAGER_ID plus a random suffix), for ttl.
type leases struct {
	store    rdb.Leases
	instance string
	ttl      time.Duration
}

// take takes or renews a lease; false: another instance holds it.
func (l leases) take(ctx context.Context, name string) (bool, error) {
	return l.store.TakeLease(ctx, name, l.instance, l.ttl)
}

// release gives a lease back, if this instance holds it.
func (l leases) release(ctx context.Context, name string) error {
	return l.store.ReleaseLease(ctx, name, l.instance)
}

// Start campaigns until Stop.
func (l *Leader) Start(ctx context.Context) { l.start(ctx, l.run) }

// Stop steps down: the leader components stop and the lease is released,
// so that another manager takes over at once.
func (l *Leader) Stop() { l.job.Stop() }

func (l *Leader) run(ctx context.Context) {
	defer func() {
		if l.leading {
			l.stepDown()
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = l.leases.release(rctx, l.lease)
		}
	}()
	every(ctx, l.leases.ttl/3, func(ctx context.Context) {
		// The lease runs from when the call was sent, not from its answer;
		// and a call that hangs must not hold the next tick.
		sent := time.Now()
		tctx, cancel := context.WithTimeout(ctx, l.leases.ttl/3)
		ok, err := l.leases.take(tctx, l.lease)
		cancel()
		switch {
		case err == nil && ok:
			l.renewed = sent
			if !l.leading {
				l.leading = true
				l.log.Info("leader: this manager runs the components of a lease", "lease", l.lease, "instance", l.leases.instance)
				for _, j := range l.jobs {
					j.Start(ctx)
				}
			}
		case err == nil && !ok:
			if l.leading {
				l.log.Warn("leader lease lost to another manager", "lease", l.lease)
				l.stepDown()
			}
		default:
			if l.leading && time.Since(l.renewed) >= l.leases.ttl*2/3 {
				l.log.Warn("leader lease cannot be renewed: stepping down", "lease", l.lease, "err", err)
				l.stepDown()
			}
		}
	})
}

func (l *Leader) stepDown() {
	for i := len(l.jobs) - 1; i >= 0; i-- {
		l.jobs[i].Stop()
	}
	l.leading = false
}
