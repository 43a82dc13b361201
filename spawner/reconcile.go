package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// ReconcileReport counts what one reconciliation fixed.
type ReconcileReport struct {
	OrphansRemoved int // labelled containers Redis does not know
	MissingMarked  int // workers whose container is gone, retired
	StatesFixed    int // status hashes that disagreed with the engine
	Started        int // workers left in "created" by a create cut short, started
	Exited         int // workers whose container exited unseen, retired
	TakenOver      int // retirements whose manager died, finished
	UsersDeleted   int // Redis users of workers that are gone (a create cut short)
	HoldersRemoved int // what the engine kept for creates and no manager needs (Docker: spare network namespaces)
	ContainersSeen int
	WorkersKnown   int
}

// Reconcile makes Redis and the engine agree. It reads Redis first (the
// workers, creates and retirements under way) and lists containers after,
// so that a worker made in between is never taken for an orphan:
//   - a container no record knows, older than CreationGrace: removed;
//   - a member whose container stayed "created" past CreationGrace (its
//     create was cut short between create and start): started;
//   - a member whose container exited unseen: retired as dead;
//   - a member with no container: retired (a create joins the workers set
//     only after its container exists);
//   - a retirement whose lease ran out: finished.
func (s *Spawner) Reconcile(ctx context.Context) (ReconcileReport, error) {
	return parts{s}.reconciler().Reconcile(ctx)
}

// Reconcile is Spawner.Reconcile.
func (s *Reconciler) Reconcile(ctx context.Context) (ReconcileReport, error) {
	var rep ReconcileReport
	workers, creating, retiring, err := s.rdb.Slots(ctx)
	if err != nil {
		return rep, redisError(err, "reconcile")
	}
	placed, err := s.rdb.Placements(ctx)
	if err != nil {
		return rep, redisError(err, "reconcile")
	}
	cs, err := s.engine.List(ctx, engine.Filter{})
	if err != nil {
		return rep, engineError(err, "reconcile: list containers")
	}
	rep.ContainersSeen, rep.WorkersKnown = len(cs), len(workers)
	known := map[string]bool{}
	for _, id := range append(append(creating, retiring...), workers...) {
		known[id] = true
	}
	member := map[string]bool{}
	for _, id := range workers {
		member[id] = true
	}
	now := s.now()
	withContainer := map[string]bool{}
	for _, c := range cs {
		if c.Role != "" {
			continue // kept by the engine for creates (Sweep's)
		}
		id := c.Worker
		made := c.Labels[protocol.LabelWorkerID] // the worker it was made for: another while a wake takes a warm pool worker's
		withContainer[id] = true
		if made != "" {
			withContainer[made] = true
		}
		created, _ := protocol.ParseTime(c.Labels[protocol.LabelCreatedAt])
		if created.IsZero() {
			created = c.Created
		}
		old := now.Sub(created) >= s.creationGrace
		switch {
		case member[id] && s.fleet.Mine(placed[id]):
			s.reconcileMember(ctx, id, c, old, &rep)
		case member[id] && old && c.Labels[ctlplane.LabelHost] == s.Host():
			// A container this host made for a worker now placed on
			// another (woken or made there while this host was lost): an
			// earlier incarnation's.
			if err := s.engine.Remove(ctx, c.ID); err == nil {
				rep.OrphansRemoved++
				s.log.Info("container of a worker now on another host removed", "container_id", c.ID, "worker_id", id, "host", placed[id])
			}
		case known[id] || !old || (made != id && (member[made] || known[made])):
			// A create, a retirement, or a warm pool worker's hand-over to a
			// woken worker under way: theirs.
		default:
			if err := s.engine.Remove(ctx, c.ID); err == nil {
				rep.OrphansRemoved++
				s.log.Info("orphan container removed", "container_id", c.ID, "worker_id", id)
			}
		}
	}
	for _, id := range workers {
		if withContainer[id] || !s.fleet.Mine(placed[id]) {
			continue // another host's worker: its containers are on its engine
		}
		// A create joins the workers set only once its container exists,
		// and the set was read before the list: the container is gone,
		// without the manager seeing it die: a death all the same.
		if ok, err := s.workers.retire(ctx, id, retirement{reason: protocol.RemovedGone, died: true, exitCode: -1, code: protocol.CodeKilled,
			msg: "the worker's container is gone (removed while no manager watched)", unasked: true}); err != nil {
			s.log.Warn("retire a worker whose container is gone", "worker_id", id, "err", err)
		} else if ok {
			rep.MissingMarked++
		}
	}
	s.syncPaused(ctx, workers, placed)
	rep.TakenOver = s.finishRetirements(ctx, placed)
	rep.UsersDeleted = s.dropStrayUsers(ctx)
	rep.HoldersRemoved = s.engine.Sweep(ctx)
	s.log.Info("reconciled", "orphans_removed", rep.OrphansRemoved, "missing_retired", rep.MissingMarked,
		"states_fixed", rep.StatesFixed, "started", rep.Started, "exited", rep.Exited, "taken_over", rep.TakenOver, "containers", rep.ContainersSeen)
	s.obs.reconciled(s.now(), rep)
	return rep, nil
}

// reconcileMember settles one member's container.
func (s *Reconciler) reconcileMember(ctx context.Context, id string, c engine.Instance, old bool, rep *ReconcileReport) {
	switch c.State {
	case engine.Created:
		if !old {
			return
		}
		cid, err := s.engine.Start(ctx, c.ID)
		if err != nil {
			s.log.Warn("start a worker whose create was cut short", "worker_id", id, "err", err)
			if _, err := s.workers.retire(ctx, id, retirement{reason: protocol.RemovedStuck, died: true, exitCode: -1, code: protocol.CodeUpstreamUnavailable,
				msg: "the worker's container could not be started"}); err != nil {
				s.log.Warn("retire a worker that cannot start", "worker_id", id, "err", err)
			}
			return
		}
		s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning), protocol.StatusFieldContainerID: cid})
		s.lifecycle(ctx, id, protocol.EventCreated, map[string]any{"container_id": cid, "reconciled": true})
		rep.Started++
	case engine.Exited, engine.Dead:
		retireDied(ctx, s.env, s.workers, id, exitCodeOf(ctx, s, c.ID), false)
		rep.Exited++
	case engine.Running, engine.Suspended:
		want := protocol.ContainerRunning
		if c.State == engine.Suspended {
			want = protocol.ContainerPaused
		}
		if got, err := s.rdb.StatusField(ctx, id, protocol.StatusFieldContainer); err == nil && got != string(want) {
			s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(want)})
			rep.StatesFixed++
		}
	}
}

// syncPaused makes this host's paused set (Keys.HostPaused) say what its
// workers' status hashes say. Every write of a status keeps the set with
// it; this repairs what was written otherwise (a manager of an earlier
// version, a hand), so that no paused worker is left out of wake-up.
func (s *Reconciler) syncPaused(ctx context.Context, workers []string, placed map[string]string) {
	ids, err := s.rdb.Paused(ctx, s.Host())
	if err != nil {
		s.log.Warn("reconcile: read the paused set", "err", err)
		return
	}
	for _, id := range workers {
		if s.fleet.Mine(placed[id]) {
			ids = append(ids, id)
		}
	}
	if err := s.rdb.SyncPaused(ctx, s.Host(), ids); err != nil {
		s.log.Warn("reconcile: repair the paused set", "err", err)
	}
}

// dropStrayUsers deletes the Redis users of this prefix that belong to no
// worker, create or retirement: a create cut short before its worker
// joined. The users are listed before the records are read, so a user
// made meanwhile belongs to a create already recorded.
func (s *Reconciler) dropStrayUsers(ctx context.Context) int {
	if !s.users.aclMode(ctx) {
		return 0
	}
	ids, err := s.rdb.WorkerUsers(ctx)
	if err != nil {
		s.log.Warn("list worker users", "err", err)
		return 0
	}
	workers, creating, retiring, err := s.rdb.Slots(ctx)
	if err != nil {
		return 0
	}
	known := map[string]bool{}
	for _, id := range append(append(workers, creating...), retiring...) {
		known[id] = true
	}
	n := 0
	for _, id := range ids {
		if known[id] {
			continue
		}
		if err := s.users.drop(ctx, id); err == nil {
			n++
		}
	}
	return n
}

// finishRetirements takes over the retirements of this host's workers
// whose lease ran out (their manager died) and returns how many it
// finished; placed is the placement hash (nil: read it).
func (s *Reconciler) finishRetirements(ctx context.Context, placed map[string]string) int {
	stale, err := s.rdb.StaleRetirements(ctx, s.now())
	if err != nil || len(stale) == 0 {
		return 0
	}
	if placed == nil {
		if placed, err = s.rdb.Placements(ctx); err != nil {
			return 0
		}
	}
	n := 0
	for _, id := range stale {
		if !s.fleet.Mine(placed[id]) {
			continue // its host finishes it, or HostWatch if that host is lost
		}
		if ok, err := s.workers.retire(ctx, id, retirement{reason: protocol.RemovedTakeover, died: true, exitCode: -1, code: protocol.CodeKilled,
			msg: "the worker was retired by a manager that died"}); err != nil {
			s.log.Warn("finish a retirement", "worker_id", id, "err", err)
		} else if ok {
			n++
		}
	}
	return n
}

func exitCodeOf(ctx context.Context, s *Reconciler, containerID string) int {
	insp, err := s.engine.Inspect(ctx, containerID)
	if err != nil {
		return -1
	}
	return insp.ExitCode
}

// Reconciler runs Reconcile every RECONCILE_INTERVAL, and every lease for
// the retirements whose manager died. It runs on the leader.
type Reconciler struct {
	job
	reconcilerParams
}

// reconcilerParams is what a Reconciler is built from.
type reconcilerParams struct {
	*env
	engine        engine.Engine // what it keeps beside the workers and no manager needs goes at each reconciliation (Sweep)
	workers       retirer
	users         *workerUsers
	obs           *observer
	creationGrace time.Duration // CREATION_GRACE: a younger container may be a create's
	interval      time.Duration // RECONCILE_INTERVAL
	leaseTTL      time.Duration // retirements whose lease ran out are taken over every third of it
}

func newReconciler(p reconcilerParams) *Reconciler { return &Reconciler{reconcilerParams: p} }

// Start reconciles until Stop.
func (r *Reconciler) Start(ctx context.Context) { r.start(ctx, r.run) }

func (r *Reconciler) run(ctx context.Context) {
	last := time.Time{}
	every(ctx, min(r.interval, r.leaseTTL/3), func(ctx context.Context) {
		if time.Since(last) < r.interval {
			r.finishRetirements(ctx, nil)
			return
		}
		last = time.Now()
		if _, err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("reconcile", "err", err)
		}
	})
}
