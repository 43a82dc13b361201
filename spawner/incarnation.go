package spawner

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// A worker is an identity: its id, spec, input and output streams, Redis
// user, project volume and session. A container is one incarnation of it.
// A long-lived worker whose container ended without the runtime asking
// (a crash, the OOM killer, the engine stopping it, a heartbeat that
// expired) gets a new container under the same id: its retirement, once
// it has answered the task in flight, becomes a new incarnation instead
// of an end. The slot stays taken throughout (the worker is in Retiring,
// under the retirement's lease, until its new container exists, then
// back in Workers). Tasks waiting on its input stay there for the new
// incarnation. An incarnation that dies before it completes a task counts
// toward MaxReplacements, each waiting ReplaceBackoff doubled; past the
// cap the retirement goes on and ends the identity (replace_failed,
// REPLACE_LIMIT).

// reincarnate makes a new incarnation of a worker being retired (the
// caller owns its retirement, its container is gone and its held tasks
// answered). It reports whether the worker lives on (in Workers again, or
// retired anew by a failed start); false: the caller ends the identity.
func (s *Spawner) reincarnate(ctx context.Context, id string, h map[string]string) (bool, error) {
	var spec protocol.WorkerSpec
	if err := json.Unmarshal([]byte(h[protocol.StatusFieldSpec]), &spec); err != nil {
		s.log.Warn("reincarnate a dead worker: unreadable spec", "worker_id", id, "err", err)
		s.lifecycle(ctx, id, protocol.EventReplaceFailed, map[string]any{"code": protocol.CodeInternalError, "error": err.Error()})
		return false, nil
	}
	if spec.Kind == "" {
		spec.Kind = protocol.KindLongLived
	}
	// An incarnation that completed a task proved the spec: the count
	// of deaths in a row restarts.
	chain := atoi(h[protocol.StatusFieldReplacements])
	done := atoi(h[protocol.StatusFieldTasksDone])
	if done > atoi(h[protocol.StatusFieldIncarnationTasks]) {
		chain = 0
	}
	if chain >= s.cfg.MaxReplacements {
		s.log.Warn("a worker that keeps dying gets no new incarnation", "worker_id", id, "replacements", chain)
		s.lifecycle(ctx, id, protocol.EventReplaceFailed, map[string]any{"code": protocol.CodeReplaceLimit, "replacements": chain})
		s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldError: string(protocol.CodeReplaceLimit) + ": died before completing a task after " + strconv.Itoa(chain) + " new incarnations"})
		return false, nil
	}
	wait := s.cfg.ReplaceBackoff << chain
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-s.stopping:
		// The manager stops: no new container now, and no end either.
		return true, s.hib.hibernated(ctx, id, h, hibernateShutdown)
	case <-time.After(wait):
	}
	n := max(atoi(h[protocol.StatusFieldIncarnation]), 1) + 1
	s.writeStatus(ctx, id, map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerStarting), protocol.StatusFieldContainer: string(protocol.ContainerStarting),
		protocol.StatusFieldRequestID: "", protocol.StatusFieldTaskID: "", protocol.StatusFieldOutputStream: "", protocol.StatusFieldTaskStarted: "",
		protocol.StatusFieldAttempt: "", protocol.StatusFieldHealth: string(protocol.HealthHealthy),
		protocol.StatusFieldReplacements: chain + 1, protocol.StatusFieldIncarnation: n,
		protocol.StatusFieldIncarnatedAt: protocol.FormatTime(s.now()), protocol.StatusFieldIncarnationTasks: done})
	if err := s.incarnate(ctx, id, spec, h, n, s.revive); err != nil {
		s.log.Warn("a new incarnation was not made", "worker_id", id, "err", err)
		s.lifecycle(ctx, id, protocol.EventReplaceFailed, map[string]any{"code": ProtocolError(err).Code, "error": err.Error()})
		return false, nil
	}
	s.log.Info("dead worker's new incarnation", "worker_id", id, "incarnation", n, "after", wait.String())
	return true, nil
}

// errLostRace: a new incarnation's container was made, but the worker
// was taken meanwhile (a delete won over a wake): the container is gone.
var errLostRace = errorf(protocol.CodeConflict, "the worker was deleted while its new incarnation was made")

// revive brings a worker the caller is retiring back into Workers.
func (s *Spawner) revive(ctx context.Context, id string) error {
	ok, err := s.rdb.Revive(ctx, id)
	if err != nil {
		return redisError(err, "revive %s", id)
	}
	if !ok {
		return errLostRace
	}
	return nil
}

// incarnate makes and starts the container of incarnation n of a worker,
// joining it to Workers through enter (revive after a death, the wake's
// join after a hibernation) before it starts, so that its death is seen.
// A container that does not start is removed and the worker retired for
// good (the caller sees no error: the identity has ended).
func (s *Spawner) incarnate(ctx context.Context, id string, spec protocol.WorkerSpec, h map[string]string, n int, enter func(ctx context.Context, id string) error) error {
	img, err := s.inst.workerImage(ctx, id, spec)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.volumes.touch(cctx, spec); err != nil {
		return err
	}
	redisURL, err := s.users.redisURL(cctx, id, spec)
	if err != nil {
		return err
	}
	// The same path as a create's container (build): a new model token
	// (the gateway's socket directory, open again, takes it in place of
	// the last incarnation's) and, sealed, a spare network namespace.
	o := createOpts{pool: h[protocol.StatusFieldPool], poolState: h[protocol.StatusFieldPoolState], modelToken: newModelToken()}
	if o.credentialHosts, err = s.seals.open(cctx, id, spec, o.modelToken); err != nil {
		return err
	}
	now := s.now()
	cid, err := s.inst.createContainer(cctx, id, "", spec, &img, redisURL, now, &o)
	if err != nil {
		return err
	}
	// In Workers before it starts: its death from now on is seen.
	if err := enter(cctx, id); err != nil {
		_ = s.engine.Remove(context.WithoutCancel(ctx), cid)
		return err
	}
	if cid, err = s.engine.Start(cctx, cid); err != nil {
		serr := engineError(err, "start container of %s", id)
		if _, rerr := s.retire(ctx, id, retirement{reason: protocol.RemovedStuck, died: true, exitCode: -1, code: serr.Code, msg: serr.Err.Error()}); rerr != nil {
			s.log.Warn("retire a worker whose new incarnation did not start", "worker_id", id, "err", rerr)
		}
		return nil
	}
	detail := map[string]any{"container_id": cid, "image": img.Tag, "incarnation": n}
	if _, err := s.rdb.Started(cctx, id, s.Host(), s.now(), map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning),
		protocol.StatusFieldContainerID: cid, protocol.StatusFieldImage: img.Tag, protocol.StatusFieldHost: s.Host()},
		protocol.Lifecycle{WorkerID: id, Event: protocol.EventCreated, Source: protocol.SourceSpawner, Timestamp: s.now(), Detail: detail, Host: s.Host()}); err != nil {
		s.log.Warn("status and created event not written", "worker_id", id, "err", err)
	}
	return nil
}
