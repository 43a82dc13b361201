package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// MaxAttempts is how many workers a developer-queue task is handed to
// before it fails for good.
const MaxAttempts = 3

// retirement is why and how a worker is retired.
type retirement struct {
	reason   protocol.RemovedReason
	graceful bool // SIGTERM and the stop timeout (the wrapper finishes its task) rather than a kill
	// code and msg answer the tasks the worker leaves unanswered.
	code protocol.Code
	msg  string
	// died: the container ended on its own (exit code, OOM) or was found
	// dead; a "died" event is published and the worker's state is failed.
	died     bool
	exitCode int
	oom      bool
	replace  bool // a long-lived worker with a spec gets a replacement (REPLACE_DEAD_WORKERS)
	// late: the tasks came after the retirement (answered with code and
	// msg as they are, WORKER_GONE).
	late     bool
	hostLost bool // its host was lost: its container is out of reach; the worker lives on on this host
	// replacing is set by retire: a next incarnation or a replacement of
	// the worker is coming, which a task that asked for retries is put
	// back on the input for.
	replacing bool
	// unasked: the container ended (or vanished) without the runtime
	// asking; a long-lived worker with a spec gets a new incarnation
	// under its id (incarnation.go).
	unasked bool
}

// retirements retire workers: the one path by which a worker ends, and
// what follows (a new incarnation, a replacement, a migration off a lost
// host, or the end of the worker's identity). What follows a death is the
// Spawner's (reincarnate, replace) and the hibernation's (a lost host's
// worker hibernated here and woken), given as functions and a part.
type retirements struct {
	*env
	cfg     *Config
	inst    *instances
	seals   *sealing
	answers *answers
	users   *workerUsers
	hib     *hibernation
	// reincarnate starts a new incarnation of a worker that died under its
	// id, and reports whether it lives on; replace makes a new worker that
	// takes a dead one's tasks, and returns its id and the tasks moved.
	reincarnate func(ctx context.Context, id string, h map[string]string) (bool, error)
	replace     func(ctx context.Context, oldID string, h map[string]string, hostLost bool) (string, int, error)
}

// retire is the one path by which a worker ends, whatever the cause
// (delete, death, eviction, pause timeout, reconciliation). In order:
//  1. it leaves the workers set for the retiring set, atomically, under a
//     lease: exactly one caller retires it, and nothing judges, pauses or
//     replaces it from then on;
//  2. its container is stopped (graceful) or killed, and removed;
//  3. every task it held or had not read is answered once (a developer
//     task goes back to the queue, up to MaxAttempts; a task that asked
//     for retries goes back on the input for the worker's next
//     incarnation, or for its replacement, which a death of a worker
//     holding one brings), or moved to its replacement;
//  4. its project's session hold is released, its keys expire after the
//     retention, and it leaves the retiring set.
//
// A manager that dies in the middle leaves the retirement leased; the
// leader takes it over when the lease runs out and does every step again
// (each is idempotent). retire reports whether this call retired it.
func (s *retirements) retire(ctx context.Context, id string, r retirement) (bool, error) {
	owns, takeover, err := s.rdb.BeginRetire(ctx, id, string(r.reason), s.now(), s.cfg.LeaseTTL)
	if err != nil {
		return false, redisError(err, "retire %s", id)
	}
	if !owns {
		return false, nil
	}
	// The retirement may outlive the caller's context (a command's reply
	// timeout): it runs to its end, bounded by the stop timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout+time.Minute)
	defer cancel()
	lease := s.keepRetiring(ctx, id)
	defer lease.stop()
	if takeover {
		s.log.Warn("taking over a retirement whose manager died", "worker_id", id, "reason", r.reason)
	}
	h, err := s.rdb.Status(ctx, id)
	if err != nil {
		return true, redisError(err, "status of %s", id)
	}
	if pool := h[protocol.StatusFieldPool]; pool != "" {
		if _, err := s.rdb.DropWarm(ctx, pool, id); err != nil {
			return true, redisError(err, "pool %s", pool)
		}
	}
	if err := s.inst.removeContainer(ctx, id, r.graceful); err != nil {
		return true, err // the retirement stays leased: the leader finishes it
	}
	p := s.planRetirement(id, h, r)
	if !p.reincarnating {
		// The socket directory belongs to the identity: closed only when
		// the identity ends.
		s.seals.close(ctx, id)
	}
	s.markRetired(ctx, id, h, r)
	// A death that brings no new incarnation (a takeover, a stuck start)
	// still brings a replacement when its task in flight asked for
	// retries (retries.go).
	p.replacing = p.replacing || p.respawn && !p.reincarnating && r.died && s.answers.retriesInFlight(ctx, id, h, p.input, p.group)
	r.replacing = p.replacing
	if err := s.answers.answerHeld(ctx, id, h, p.kind, s.keys.InputsFor(p.kind, id), p.group, r, p.replacing); err != nil {
		return true, err
	}
	return true, s.afterRemoval(ctx, id, h, r, p)
}

// retirementPlan is what follows a worker's removal.
type retirementPlan struct {
	kind         protocol.Kind
	input, group string
	respawn      bool // a long-lived worker with a spec: it may live on under its id
	// reincarnating: a new incarnation on this host (incarnation.go);
	// migrating: its host lost, hibernated here and woken at once
	// (hibernate.go); replacing: a new worker takes its tasks (replace.go).
	reincarnating, migrating, replacing bool
}

// planRetirement says what follows the removal of worker id. A
// long-lived worker with a spec that died lives on under its id; a warm
// pool worker belongs to no consumer yet: its pool refills.
func (s *retirements) planRetirement(id string, h map[string]string, r retirement) retirementPlan {
	p := retirementPlan{}
	p.kind, p.input, p.group = inputOf(s.keys, id, protocol.Kind(h[protocol.StatusFieldKind]))
	p.respawn = s.cfg.ReplaceDead && p.kind == protocol.KindLongLived && h[protocol.StatusFieldSpec] != ""
	ours := h[protocol.StatusFieldPoolState] != protocol.PoolWarm
	p.reincarnating = p.respawn && r.unasked && !r.hostLost && ours
	p.migrating = p.respawn && r.hostLost && r.replace && ours
	p.replacing = p.respawn && r.replace || p.reincarnating
	return p
}

// markRetired writes a removed worker's end to its status hash: stopped,
// or failed with its exit code and cause (and a died event).
func (s *retirements) markRetired(ctx context.Context, id string, h map[string]string, r retirement) {
	state, container := protocol.WorkerStopped, protocol.ContainerStopped
	fields := map[string]any{}
	if r.died {
		state, container = protocol.WorkerFailed, protocol.ContainerFailed
		fields[protocol.StatusFieldExitCode] = r.exitCode
		fields[protocol.StatusFieldError] = string(r.code) + ": " + r.msg
		s.lifecycleOn(ctx, hostOf(h, s), id, protocol.EventDied, map[string]any{"exit_code": r.exitCode, "oom": r.oom, "code": r.code})
		s.log.Warn("worker died", "worker_id", id, "exit_code", r.exitCode, "oom", r.oom, "code", r.code, "request_id", h[protocol.StatusFieldRequestID])
	}
	fields[protocol.StatusFieldState], fields[protocol.StatusFieldContainer] = string(state), string(container)
	s.writeStatusOn(ctx, hostOf(h, s), id, fields)
}

// afterRemoval carries out p once a worker's instance is gone and its
// held tasks answered: it migrates, reincarnates or replaces the worker,
// or ends its identity (its waiting tasks answered, its Redis user
// dropped, the retirement ended).
func (s *retirements) afterRemoval(ctx context.Context, id string, h map[string]string, r retirement, p retirementPlan) error {
	if p.migrating {
		if err := s.hib.hibernated(ctx, id, h, hibernateHostLost); err != nil {
			return err
		}
		// Woken now (a slot, the wake's lease); one that cannot be stays
		// hibernated here, and the next task on its input wakes it.
		if err := s.hib.wakeHibernated(ctx, id); err != nil {
			s.log.Warn("a lost host's worker was not woken here", "worker_id", id, "err", err)
		}
		return nil
	}
	replacing := p.replacing
	if p.reincarnating {
		lives, err := s.reincarnate(ctx, id, h)
		if err != nil || lives {
			return err
		}
		replacing = false
		s.seals.close(ctx, id)
	}
	detail := map[string]any{"reason": r.reason}
	if replacing {
		newID, moved, err := s.replace(ctx, id, h, r.hostLost)
		if err != nil {
			return err
		}
		if newID != "" {
			detail["replaced_by"], detail["tasks_moved"] = newID, moved
		} else {
			replacing = false
		}
	}
	if p.kind == protocol.KindLongLived && !replacing {
		if err := s.answers.answerWaiting(ctx, id, h, p.input, p.group, r); err != nil {
			return err
		}
	}
	if err := s.users.drop(ctx, id); err != nil {
		return err
	}
	s.lifecycleOn(ctx, hostOf(h, s), id, protocol.EventRemoved, detail)
	if err := s.rdb.EndRetire(ctx, id, p.kind, protocol.AgentType(h[protocol.StatusFieldAgentType]), h[protocol.StatusFieldProjectID], s.now()); err != nil {
		return redisError(err, "end retirement of %s", id)
	}
	if pool := h[protocol.StatusFieldPool]; pool != "" {
		// Best effort: the pool's tending drops a member no longer in
		// the workers set.
		_ = s.rdb.DropPoolMember(ctx, pool, id)
	}
	s.log.Info("worker retired", "worker_id", id, "reason", r.reason)
	return nil
}

// hostOf is the host a worker's status hash names, or this one.
func hostOf(h map[string]string, here interface{ Host() string }) string {
	if v := h[protocol.StatusFieldHost]; v != "" {
		return v
	}
	return here.Host()
}

// keepRetiring renews a retirement's lease until stopped.
func (s *retirements) keepRetiring(ctx context.Context, id string) *renewal {
	return renewEvery(ctx, s.cfg.LeaseTTL/3, func(ctx context.Context) bool {
		_ = s.rdb.RenewRetire(ctx, id, s.now(), s.cfg.LeaseTTL)
		return true
	})
}
