package spawner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
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
func (s *Spawner) retire(ctx context.Context, id string, r retirement) (bool, error) {
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
	if err := s.removeContainer(ctx, id, r.graceful); err != nil {
		return true, err // the retirement stays leased: the leader finishes it
	}
	kind, input, group := s.inputOf(id, protocol.Kind(h[protocol.StatusFieldKind]))
	// A long-lived worker with a spec that died lives on under its id: a
	// new incarnation on this host (incarnation.go), or, its host lost,
	// hibernated on this host and woken here at once (hibernate.go). A
	// warm pool worker belongs to no consumer yet: its pool refills.
	respawn := s.cfg.ReplaceDead && kind == protocol.KindLongLived && h[protocol.StatusFieldSpec] != ""
	ours := h[protocol.StatusFieldPoolState] != protocol.PoolWarm
	reincarnating := respawn && r.unasked && !r.hostLost && ours
	migrating := respawn && r.hostLost && r.replace && ours
	replacing := respawn && r.replace || reincarnating
	if !reincarnating {
		// The socket directory belongs to the identity: closed only when
		// the identity ends.
		s.closeSealed(ctx, id)
	}
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

	// A death that brings no new incarnation (a takeover, a stuck start)
	// still brings a replacement when its task in flight asked for
	// retries (retries.go).
	replacing = replacing || respawn && !reincarnating && r.died && s.retriesInFlight(ctx, id, h, input, group)
	r.replacing = replacing
	if err := s.answerHeld(ctx, id, h, kind, s.keys.InputsFor(kind, id), group, r, replacing); err != nil {
		return true, err
	}
	if migrating {
		if err := s.hibernated(ctx, id, h, hibernateHostLost); err != nil {
			return true, err
		}
		// Woken now (a slot, the wake's lease); one that cannot be stays
		// hibernated here, and the next task on its input wakes it.
		if err := s.wakeHibernated(ctx, id); err != nil {
			s.log.Warn("a lost host's worker was not woken here", "worker_id", id, "err", err)
		}
		return true, nil
	}
	if reincarnating {
		lives, err := s.reincarnate(ctx, id, h)
		if err != nil || lives {
			return true, err
		}
		replacing = false
		s.closeSealed(ctx, id)
	}
	detail := map[string]any{"reason": r.reason}
	if replacing {
		newID, moved, err := s.replace(ctx, id, h, r.hostLost)
		if err != nil {
			return true, err
		}
		if newID != "" {
			detail["replaced_by"], detail["tasks_moved"] = newID, moved
		} else {
			replacing = false
		}
	}
	if kind == protocol.KindLongLived && !replacing {
		if err := s.answerWaiting(ctx, id, h, input, group, r); err != nil {
			return true, err
		}
	}
	if err := s.users.drop(ctx, id); err != nil {
		return true, err
	}
	s.lifecycleOn(ctx, hostOf(h, s), id, protocol.EventRemoved, detail)
	if err := s.rdb.EndRetire(ctx, id, kind, protocol.AgentType(h[protocol.StatusFieldAgentType]), h[protocol.StatusFieldProjectID], s.now()); err != nil {
		return true, redisError(err, "end retirement of %s", id)
	}
	if pool := h[protocol.StatusFieldPool]; pool != "" {
		// Best effort: the pool's tending drops a member no longer in
		// the workers set.
		_ = s.rdb.DropPoolMember(ctx, pool, id)
	}
	s.log.Info("worker retired", "worker_id", id, "reason", r.reason)
	return true, nil
}

// hostOf is the host a worker's status hash names, or this one.
func hostOf(h map[string]string, s *Spawner) string {
	if v := h[protocol.StatusFieldHost]; v != "" {
		return v
	}
	return s.Host()
}

// keepRetiring renews a retirement's lease until stopped.
func (s *Spawner) keepRetiring(ctx context.Context, id string) *renewal {
	return renewEvery(ctx, s.cfg.LeaseTTL/3, func(ctx context.Context) bool {
		_ = s.rdb.RenewRetire(ctx, id, s.now(), s.cfg.LeaseTTL)
		return true
	})
}

// removeContainer stops (graceful: SIGTERM, then the stop timeout) or
// kills a worker's container and removes it; a container already gone is
// no error.
func (s *Spawner) removeContainer(ctx context.Context, id string, graceful bool) error {
	c, err := s.find(ctx, id)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if graceful && c.State.Up() {
		if c.State == engine.Suspended {
			// A paused process cannot take SIGTERM: wake it first.
			_ = s.engine.Resume(ctx, c.ID)
		}
		// Stopping may take the whole stop timeout: a context of its own.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout+15*time.Second)
		defer cancel()
		if err := s.engine.Stop(sctx, c.ID, s.cfg.StopTimeout); err != nil && !errors.Is(err, engine.ErrNotFound) {
			return engineError(err, "stop worker %s", id)
		}
	}
	if err := s.engine.Remove(ctx, c.ID); err != nil && !s.goneSoon(ctx, c.ID) {
		return engineError(err, "remove worker %s", id)
	}
	return nil
}

// goneSoon waits (up to 10 s) for a container that someone else is
// removing ("removal already in progress"), and says whether it went.
func (s *Spawner) goneSoon(ctx context.Context, containerID string) bool {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, err := s.engine.Inspect(ctx, containerID); errors.Is(err, engine.ErrNotFound) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return false
}

// answerHeld answers the tasks a retired worker held: the one its status
// names and every entry delivered to it and never acknowledged. A
// retryable developer task goes back to the queue; with a replacement
// coming, a long-lived worker's held tasks other than the one in flight
// are put back on its input, unread, for the replacement.
func (s *Spawner) answerHeld(ctx context.Context, id string, h map[string]string, kind protocol.Kind, inputs []string, group string, r retirement, replacing bool) error {
	inFlight := h[protocol.StatusFieldRequestID]
	answeredInFlight := false
	for _, input := range inputs {
		found, err := s.answerHeldOn(ctx, id, h, kind, input, group, r, replacing)
		if err != nil {
			return err
		}
		answeredInFlight = answeredInFlight || found
	}
	if inFlight != "" && !answeredInFlight {
		// Its entry is gone (acknowledged): answer the run all the same
		// unless it is terminal.
		e := rdb.Entry{Task: protocol.Task{RequestID: inFlight, TaskID: h[protocol.StatusFieldTaskID]}, OK: true}
		return s.answer(ctx, id, h, kind, inputs[0], group, e, true, r)
	}
	return nil
}

// answerHeldOn is answerHeld for one input stream; it reports whether
// it answered the task in flight.
func (s *Spawner) answerHeldOn(ctx context.Context, id string, h map[string]string, kind protocol.Kind, input, group string, r retirement, replacing bool) (bool, error) {
	held, err := s.rdb.Held(ctx, input, group, id)
	if err != nil {
		return false, redisError(err, "tasks held by %s", id)
	}
	inFlight := h[protocol.StatusFieldRequestID]
	answeredInFlight := false
	for _, e := range held {
		if !e.OK {
			// Not a task: nothing to answer, but never left pending.
			_ = s.rdb.Ack(ctx, input, group, e.Msg.ID)
			continue
		}
		isInFlight := e.Task.RequestID == inFlight
		answeredInFlight = answeredInFlight || isInFlight
		if replacing && !isInFlight {
			if _, err := s.rdb.Move(ctx, input, input, e.Msg, group); err != nil {
				return false, redisError(err, "put back a task of %s", id)
			}
			continue
		}
		if err := s.answer(ctx, id, h, kind, input, group, e, isInFlight, r); err != nil {
			return false, err
		}
	}
	return answeredInFlight, nil
}

// answerWaiting answers the tasks on a retired long-lived worker's input
// that it never read.
func (s *Spawner) answerWaiting(ctx context.Context, id string, h map[string]string, input, group string, r retirement) error {
	waiting, err := s.rdb.Waiting(ctx, input, group)
	if err != nil {
		return redisError(err, "tasks waiting for %s", id)
	}
	for _, e := range waiting {
		if !e.OK {
			continue
		}
		if err := s.answer(ctx, id, h, protocol.KindLongLived, input, group, e, false, r); err != nil {
			return err
		}
	}
	return nil
}

// answerGone answers the tasks sent to a retired long-lived worker since
// it was retired (WORKER_GONE) and marks them delivered, so that each is
// answered once; it returns how many it answered. A worker whose status
// hash is gone (its retention ended) has nothing to answer.
func (s *Spawner) answerGone(ctx context.Context, id string) (int, error) {
	h, err := s.rdb.Status(ctx, id)
	if err != nil || len(h) == 0 {
		return 0, err
	}
	if member, err := s.rdb.IsWorker(ctx, id); err != nil || member {
		return 0, err // back under the same id: its own wrapper reads its input
	}
	_, input, group := s.inputOf(id, protocol.KindLongLived)
	waiting, err := s.rdb.Waiting(ctx, input, group)
	if err != nil || len(waiting) == 0 {
		return 0, err
	}
	r := retirement{reason: protocol.RemovedGone, late: true, code: protocol.CodeWorkerGone,
		msg: "the worker " + id + " was retired before this task was sent: send it to another worker"}
	n := 0
	for _, e := range waiting {
		if e.OK {
			if err := s.answer(ctx, id, h, protocol.KindLongLived, input, group, e, false, r); err != nil {
				return n, err
			}
			n++
		}
	}
	if err := s.rdb.Delivered(ctx, input, group, waiting[len(waiting)-1].Msg.ID); err != nil {
		return n, redisError(err, "input of %s", id)
	}
	return n, nil
}

// answer answers one task of a retired worker: a retryable developer task
// with its entry held goes back to the queue (up to MaxAttempts), any
// other gets a failed Output, unless its run is already terminal.
func (s *Spawner) answer(ctx context.Context, id string, h map[string]string, kind protocol.Kind, input, group string, e rdb.Entry, inFlight bool, r retirement) error {
	t := e.Task
	code, msg := r.code, r.msg
	if !inFlight && !r.died && !r.late {
		code, msg = protocol.CodeTerminated, fmt.Sprintf("the worker was %s before it ran this task", r.reason)
	}
	attempt, err := s.rdb.LastAttempt(ctx, t.RequestID)
	if err != nil {
		return redisError(err, "attempts of %s", t.RequestID)
	}
	if e.Msg.ID != "" && s.handsOn(kind, t, code, attempt, r) {
		n, err := s.rdb.Requeue(ctx, t.RequestID, input, group, e.Msg)
		if err != nil {
			return redisError(err, "requeue %s", t.RequestID)
		}
		if n > 0 {
			s.log.Info("a dead worker's task put back on its input", "request_id", t.RequestID, "kind", kind, "attempt", attempt+1, "code", code)
		}
		return nil
	}
	o := protocol.Output{RequestID: t.RequestID, TaskID: t.TaskID, ProjectID: t.Project(), WorkerID: id,
		AgentType: protocol.AgentType(h[protocol.StatusFieldAgentType]), Status: protocol.StatusFailed,
		Error: protocol.NewError(code, "%s", msg), Attempt: attempt, Timestamp: s.now()}
	if inFlight {
		o.ProjectID = h[protocol.StatusFieldProjectID]
		if started, err := protocol.ParseTime(h[protocol.StatusFieldTaskStarted]); err == nil && !started.IsZero() {
			o.DurationMS = s.now().Sub(started).Milliseconds()
		}
	}
	if !o.AgentType.Valid() {
		o.AgentType = ""
	}
	out := s.keys.OutputFor(kind, id)
	if inFlight && h[protocol.StatusFieldOutputStream] != "" {
		out = h[protocol.StatusFieldOutputStream]
	}
	if _, err := s.rdb.Answer(ctx, o, out, input, group, e.Msg.ID, s.now()); err != nil {
		return redisError(err, "answer %s", t.RequestID)
	}
	return nil
}
