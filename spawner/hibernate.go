package spawner

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Hibernation removes a long-lived worker's container and keeps its
// identity (incarnation.go): its id, spec, streams, status hash and
// project volume stay; its slot, memory, Redis user (made again, same
// name, at the wake) and gateway socket directory (opened again at the
// wake) are given back. The agent's session is in the project volume, so
// a worker woken on the same host resumes it. A task, cancel or message
// on its input wakes it: a new incarnation, admitted like a create (a
// slot, queued at the limit), made under a lease so that two wakes never
// make two; the task is then served.

// Reasons of a hibernation (the hibernated event's detail.reason).
const (
	hibernateIdle         = "idle"          // HIBERNATE_AFTER
	hibernatePauseTimeout = "pause_timeout" // PAUSE_TIMEOUT
	hibernateShutdown     = "shutdown"      // the manager stopped
	hibernateEvicted      = "evicted"       // EVICT_IDLE_AFTER: a create at the limit took its slot
	hibernateHostLost     = "host_lost"     // its host was lost: woken on the host that saw it
	hibernatePaused       = "paused"        // a pause, on an engine that cannot freeze (Pause)
)

// hibernatable reports whether a worker of this status hash can hibernate:
// long-lived, with a spec to make it again, and no warm pool worker (its
// pool makes another).
func hibernatable(h map[string]string) bool {
	kind := protocol.Kind(h[protocol.StatusFieldKind])
	return (kind == protocol.KindLongLived || kind == "") && h[protocol.StatusFieldSpec] != "" && h[protocol.StatusFieldPoolState] != protocol.PoolWarm
}

// hibernate removes a worker's container and keeps its identity. An idle
// worker (graceful false) is paused first, so that it reads no task while
// its container goes: a busy one is not hibernated (WORKER_BUSY). A
// graceful hibernation (the manager's stop) gives the wrapper the stop
// timeout to finish its task. What the wrapper held and had not finished
// is put back on its input for the next incarnation (the task in flight,
// if unanswered, is answered TERMINATED).
func (s *hibernation) hibernate(ctx context.Context, id, reason string, graceful bool) error {
	recheck := !graceful // an idle worker: a task that comes meanwhile keeps it
	if !graceful && !s.suspends() {
		// Nothing to freeze it with: a busy worker is refused as Pause
		// would, an idle one is stopped gracefully (a task it reads
		// meanwhile is finished in the stop timeout, or put back).
		if busy, err := s.busyCheck.busy(ctx, id); err != nil {
			return err
		} else if busy != rdb.NotBusy {
			return errorf(protocol.CodeWorkerBusy, "worker %s is busy (%s): not hibernated", id, busy)
		}
		graceful = true
	}
	if !graceful {
		if err := s.pause(ctx, id); err != nil {
			return err
		}
	}
	owns, _, err := s.rdb.BeginRetire(ctx, id, "hibernating", s.now(), s.cfg.LeaseTTL)
	if err != nil || !owns {
		return maybeRedisError(err, "hibernate %s", id) // nil when another caller retires it
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout+time.Minute)
	defer cancel()
	lease := s.keepRetiring(ctx, id)
	defer lease.stop()
	h, err := s.rdb.Status(ctx, id)
	if err != nil {
		return redisError(err, "status of %s", id)
	}
	kind, input, group := inputOf(s.keys, id, protocol.Kind(h[protocol.StatusFieldKind]))
	if recheck {
		if b, _, err := s.rdb.BusyAnyway(ctx, id, input, group); err == nil && b != rdb.NotBusy && b != rdb.BusyEnding {
			// A task came as it was frozen (or, on an engine that cannot
			// freeze, since the check): it stays, awake.
			_, _ = s.rdb.Revive(ctx, id)
			if s.suspends() {
				_ = s.unpause(ctx, id)
			}
			return errorf(protocol.CodeWorkerBusy, "worker %s became busy (%s): not hibernated", id, b)
		}
	}
	if err := s.inst.removeContainer(ctx, id, graceful); err != nil {
		return err // the retirement stays leased: the leader ends it
	}
	if h, err = s.rdb.Status(ctx, id); err != nil {
		return redisError(err, "status of %s", id)
	}
	// The next incarnation comes with the wake: a task in flight that
	// asked for retries goes back on the input for it (retries.go).
	r := retirement{reason: protocol.RemovedReason("hibernated"), code: protocol.CodeTerminated, msg: "the worker was hibernated while it ran this task", replacing: true}
	if err := s.answers.answerHeld(ctx, id, h, kind, s.keys.InputsFor(kind, id), group, r, true); err != nil {
		return err
	}
	return s.hibernated(ctx, id, h, reason)
}

// hibernated ends the hibernation of a worker the caller is retiring,
// whose container is gone and whose held tasks are settled: its socket
// directory and Redis user go, its status says hibernated, and it leaves
// Retiring for its host's hibernated set.
func (s *hibernation) hibernated(ctx context.Context, id string, h map[string]string, reason string) error {
	s.seals.close(ctx, id)
	if err := s.users.drop(ctx, id); err != nil {
		return err
	}
	s.writeStatus(ctx, id, map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerHibernated), protocol.StatusFieldContainer: string(protocol.ContainerHibernated),
		protocol.StatusFieldRequestID: "", protocol.StatusFieldTaskID: "", protocol.StatusFieldOutputStream: "", protocol.StatusFieldTaskStarted: "",
		protocol.StatusFieldContainerID: "", protocol.StatusFieldHibernatedAt: protocol.FormatTime(s.now()), protocol.StatusFieldHost: s.Host()})
	if _, err := s.rdb.Hibernate(ctx, id, s.Host()); err != nil {
		return redisError(err, "hibernate %s", id)
	}
	s.lifecycle(ctx, id, protocol.EventHibernated, map[string]any{"reason": reason, "incarnation": atoi(h[protocol.StatusFieldIncarnation])})
	s.log.Info("worker hibernated", "worker_id", id, "reason", reason)
	return nil
}

// hibernation hibernates long-lived workers and wakes them: the
// operations above, over the parts of the spawner they use. Pause,
// unpause, status and a new incarnation are the Spawner's, given as
// functions.
type hibernation struct {
	*env
	cfg       *Config
	instance  string // the wake leases' owner (Spawner.instance)
	busyCheck *busyCheck
	answers   *answers
	seals     *sealing
	users     *workerUsers
	inst      *instances
	warm      *poolWake
	admission *admission

	suspends     func() bool
	pause        func(ctx context.Context, id string) error
	unpause      func(ctx context.Context, id string) error
	status       func(ctx context.Context, id string) (protocol.WorkerInfo, error)
	keepRetiring func(ctx context.Context, id string) *renewal
	incarnate    func(ctx context.Context, id string, spec protocol.WorkerSpec, h map[string]string, n int, enter func(ctx context.Context, id string) error) error

	// waking holds the hibernated workers a wake of this process runs
	// for: the wake lease is per process, and two callers of one process
	// (the wake loop, a lost host's handling) must not both make one.
	waking sync.Map
}

// Hibernate hibernates an idle worker now (as HIBERNATE_AFTER does).
func (s *Spawner) Hibernate(ctx context.Context, id string) error { return s.hib.Hibernate(ctx, id) }

// Hibernate is Spawner.Hibernate.
func (s *hibernation) Hibernate(ctx context.Context, id string) error {
	h, err := s.rdb.Status(ctx, id)
	if err != nil {
		return redisError(err, "status of %s", id)
	}
	if !hibernatable(h) {
		return errorf(protocol.CodeInvalidCommand, "worker %s cannot hibernate (only a long-lived worker with a spec, not a warm pool worker)", id)
	}
	return s.hibernate(ctx, id, hibernateIdle, false)
}

// wakeHibernated makes a new incarnation of a hibernated worker of this
// host. A lease makes one wake at a time per worker; the wake is
// admitted like a create (it may queue for a slot) and joins Workers in
// one step with its leaving the hibernated set, unless a delete took it
// out first (then its container is removed).
func (s *hibernation) wakeHibernated(ctx context.Context, id string) error {
	if _, running := s.waking.LoadOrStore(id, true); running {
		return nil // this process wakes it already
	}
	defer s.waking.Delete(id)
	host := s.Host()
	name := "wake:" + id
	if ok, err := s.rdb.TakeLease(ctx, name, s.instance, s.cfg.LeaseTTL); err != nil || !ok {
		return maybeRedisError(err, "wake lease of %s", id) // nil: another wake is under way
	}
	held := renewEvery(ctx, s.cfg.LeaseTTL/3, func(ctx context.Context) bool {
		ok, err := s.rdb.TakeLease(ctx, name, s.instance, s.cfg.LeaseTTL)
		return err != nil || ok
	})
	defer func() { held.stop(); _ = s.rdb.ReleaseLease(context.WithoutCancel(ctx), name, s.instance) }()
	if hib, err := s.rdb.IsHibernated(ctx, host, id); err != nil || !hib {
		return maybeRedisError(err, "hibernated set") // nil: woken or deleted meanwhile
	}
	h, err := s.rdb.Status(ctx, id)
	if err != nil {
		return redisError(err, "status of %s", id)
	}
	var spec protocol.WorkerSpec
	if err := json.Unmarshal([]byte(h[protocol.StatusFieldSpec]), &spec); err != nil {
		return errorf(protocol.CodeInternalError, "worker %s: unreadable spec: %v", id, err)
	}
	if spec.Kind == "" {
		spec.Kind = protocol.KindLongLived
	}
	n := max(atoi(h[protocol.StatusFieldIncarnation]), 1) + 1
	if done, err := s.warm.wakeIntoWarm(ctx, id, spec, n); done || err != nil {
		return err
	}
	// The spec's host pin was its create's (the host may be lost since);
	// its labels still hold.
	var wakeOn *protocol.Placement
	if spec.Placement != nil {
		wakeOn = &protocol.Placement{Labels: spec.Placement.Labels}
	}
	// The fleet's placement may choose another host with more room: the
	// worker is handed to it (its hibernated set), whose wake finds the
	// slot reserved for it.
	handOff := func(ctx context.Context, to string) error {
		if _, err := s.rdb.MoveHibernated(ctx, host, to, id); err != nil {
			return redisError(err, "hand %s to host %s", id, to)
		}
		s.log.Info("hibernated worker handed to the host placed to wake it", "worker_id", id, "host", to)
		return nil
	}
	slot, to, err := s.admission.admit(ctx, id, wakeOn, createOpts{forward: handOff})
	if err != nil {
		s.stillHibernated(ctx, id, err)
		return err
	}
	if to != host {
		return handOff(ctx, to)
	}
	defer slot.stop()
	if hib, err := s.rdb.IsHibernated(ctx, host, id); err != nil || !hib {
		// Deleted while the wake waited for its slot.
		_ = s.rdb.Leave(context.WithoutCancel(ctx), id)
		s.ended(ctx, id)
		return maybeRedisError(err, "hibernated set")
	}
	s.writeStatus(ctx, id, map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerStarting), protocol.StatusFieldContainer: string(protocol.ContainerStarting),
		protocol.StatusFieldHealth: string(protocol.HealthHealthy), protocol.StatusFieldIncarnation: n,
		protocol.StatusFieldIncarnatedAt: protocol.FormatTime(s.now()), protocol.StatusFieldIncarnationTasks: h[protocol.StatusFieldTasksDone],
		protocol.StatusFieldReplacements: 0, protocol.StatusFieldHost: host})
	join := func(ctx context.Context, id string) error {
		switch got, err := s.rdb.WakeJoin(ctx, host, id); {
		case err != nil:
			return redisError(err, "wake %s", id)
		case got == 0:
			return errLostRace
		case got < 0:
			return errorf(protocol.CodeResourceExhausted, "the slot lease of %s ran out before its container was made", id)
		}
		return nil
	}
	err = s.incarnate(ctx, id, spec, h, n, join)
	if err == errLostRace {
		// No longer hibernated: a delete won, or another manager's wake
		// joined first (then its slot and placement stay as they are).
		if member, merr := s.rdb.IsWorker(context.WithoutCancel(ctx), id); merr == nil && member {
			return nil
		}
		_ = s.rdb.Leave(context.WithoutCancel(ctx), id)
		s.ended(ctx, id)
		return nil
	}
	if err != nil {
		_ = s.rdb.Leave(context.WithoutCancel(ctx), id)
		s.stillHibernated(ctx, id, err)
		return err
	}
	s.log.Info("hibernated worker woken", "worker_id", id, "incarnation", n)
	return nil
}

// resume answers a create that names an existing worker (its command's
// worker_id: a consumer that keeps one worker per user asks for it
// back). A hibernated worker of the same agent and project is woken (here
// when it is this host's; another host's is answered as it is, and the
// next task wakes it there); a live one of the same agent and project is
// answered as it is. resumed false: nothing of the kind exists, and the
// caller makes a new worker.
func (s *hibernation) resume(ctx context.Context, id string, spec protocol.WorkerSpec) (protocol.WorkerInfo, bool, error) {
	h, err := s.rdb.Status(ctx, id)
	if err != nil {
		return protocol.WorkerInfo{}, false, redisError(err, "status of %s", id)
	}
	var had protocol.WorkerSpec
	if len(h) == 0 || json.Unmarshal([]byte(h[protocol.StatusFieldSpec]), &had) != nil ||
		had.AgentType != spec.AgentType || had.ProjectID != spec.ProjectID {
		return protocol.WorkerInfo{}, false, nil
	}
	member, err := s.rdb.IsWorker(ctx, id)
	if err != nil {
		return protocol.WorkerInfo{}, false, redisError(err, "workers set")
	}
	if !member {
		if !s.isHibernated(ctx, id, h) {
			return protocol.WorkerInfo{}, false, nil // ended
		}
		if hostOf(h, s) == s.Host() {
			if err := s.wakeHibernated(ctx, id); err != nil {
				return protocol.WorkerInfo{}, true, err
			}
		}
	}
	info, err := s.status(ctx, id)
	return info, true, err
}

// stillHibernated writes back the status of a hibernated worker whose
// wake failed (the next task, or the wake-up loop's recheck, tries again),
// unless a delete ended it meanwhile.
func (s *hibernation) stillHibernated(ctx context.Context, id string, cause error) {
	ctx = context.WithoutCancel(ctx)
	if hib, err := s.rdb.IsHibernated(ctx, s.Host(), id); err != nil || !hib {
		s.ended(ctx, id)
		return
	}
	s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldState: string(protocol.WorkerHibernated),
		protocol.StatusFieldContainer: string(protocol.ContainerHibernated), protocol.StatusFieldError: cause.Error()})
}

// ended writes the status of a worker a delete ended while a wake of it
// ran (the wake's writes may have come after the delete's).
func (s *env) ended(ctx context.Context, id string) {
	s.writeStatus(context.WithoutCancel(ctx), id, map[string]any{protocol.StatusFieldState: string(protocol.WorkerStopped),
		protocol.StatusFieldContainer: string(protocol.ContainerStopped)})
}

// endHibernated ends the identity of a hibernated worker (a delete): it
// leaves the hibernated set (winning over a wake that has not joined
// yet), the tasks waiting on its input are answered WORKER_GONE, and it
// is retired as any deleted worker (keys expire after the retention,
// later tasks answered WORKER_GONE). It reports whether it did.
func (s *hibernation) endHibernated(ctx context.Context, id string, h map[string]string) (bool, error) {
	took, err := s.rdb.Unhibernate(ctx, hostOf(h, s), id)
	if err != nil || !took {
		return false, maybeRedisError(err, "hibernated set")
	}
	kind, input, group := inputOf(s.keys, id, protocol.Kind(h[protocol.StatusFieldKind]))
	r := retirement{reason: protocol.RemovedDeleted, late: true, code: protocol.CodeWorkerGone,
		msg: "the worker " + id + " was deleted while hibernated: send it to another worker"}
	if err := s.answers.answerWaiting(ctx, id, h, input, group, r); err != nil {
		return true, err
	}
	s.writeStatusOn(ctx, hostOf(h, s), id, map[string]any{protocol.StatusFieldState: string(protocol.WorkerStopped),
		protocol.StatusFieldContainer: string(protocol.ContainerStopped)})
	s.lifecycleOn(ctx, hostOf(h, s), id, protocol.EventRemoved, map[string]any{"reason": protocol.RemovedDeleted, "hibernated": true})
	if err := s.rdb.EndRetire(ctx, id, kind, protocol.AgentType(h[protocol.StatusFieldAgentType]), h[protocol.StatusFieldProjectID], s.now()); err != nil {
		return true, redisError(err, "end %s", id)
	}
	s.log.Info("hibernated worker deleted", "worker_id", id)
	return true, nil
}

// isHibernated reports whether a worker of this status hash is in its
// host's hibernated set (its status may say queued or starting while a
// wake runs).
func (s *hibernation) isHibernated(ctx context.Context, id string, h map[string]string) bool {
	hib, err := s.rdb.IsHibernated(ctx, hostOf(h, s), id)
	return err == nil && hib
}

// maybeRedisError is redisError, or nil for no error.
func maybeRedisError(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return redisError(err, format, args...)
}
