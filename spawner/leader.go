package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// component is a background job of the manager.
type component interface {
	Start(ctx context.Context)
	Stop()
}

// Leader holds the leader lease for this manager and, while it holds it,
// runs the components that must run once per key prefix (health,
// wake-on-input, timeouts, reconciliation, image GC). The lease is taken
// or renewed every third of LeaseTTL; a manager that cannot renew it
// stops its leader components before the lease can have passed to another
// (two thirds of a lease after its last renewal), and a dead leader's
// lease passes to another manager within one lease.
type Leader struct {
	job
	s    *Spawner
	jobs []component

	// Owned by the loop's goroutine.
	leading  bool
	renewed  time.Time
	onChange func(leading bool) // for tests; nil in production
}

// Start campaigns until Stop.
func (l *Leader) Start(ctx context.Context) { l.start(ctx, l.run) }

// Stop steps down: the leader components stop and the lease is released,
// so that another manager takes over at once.
func (l *Leader) Stop() { l.job.Stop() }

func (l *Leader) run(ctx context.Context) {
	s := l.s
	defer func() {
		if l.leading {
			l.stepDown()
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = s.rdb.ReleaseLease(rctx, protocol.LeaderLease, s.instance)
		}
	}()
	every(ctx, s.cfg.LeaseTTL/3, func(ctx context.Context) {
		ok, err := s.rdb.TakeLease(ctx, protocol.LeaderLease, s.instance, s.cfg.LeaseTTL)
		now := time.Now()
		switch {
		case err == nil && ok:
			l.renewed = now
			if !l.leading {
				l.leading = true
				s.log.Info("leader: this manager runs health, wake-up, timeouts, reconciliation and GC", "instance", s.instance)
				for _, j := range l.jobs {
					j.Start(ctx)
				}
				l.changed(true)
			}
		case err == nil && !ok:
			if l.leading {
				s.log.Warn("leader lease lost to another manager")
				l.stepDown()
			}
		default:
			if l.leading && now.Sub(l.renewed) > s.cfg.LeaseTTL*2/3 {
				s.log.Warn("leader lease cannot be renewed: stepping down", "err", err)
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
	l.changed(false)
}

func (l *Leader) changed(leading bool) {
	if l.onChange != nil {
		l.onChange(leading)
	}
}
