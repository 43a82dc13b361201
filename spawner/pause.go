package spawner

import (
	"context"
	"errors"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Pause freezes a worker's container (CPU 0, memory kept). Every pause
// (a command, the wrapper's request, the idle timeout) goes through here:
// a worker with a task in flight, held or waiting is never paused
// (WORKER_BUSY). The check is one atomic read of the worker's status and
// its input's delivery state, made again once the container is frozen: a
// task read between the two wakes it at once, so a paused worker never
// keeps a task in flight.
//
// On an engine that cannot freeze (Kubernetes), a pause gives back what
// a frozen worker would keep: a worker that can hibernate is hibernated
// (its pod goes, its identity stays; the next task wakes it), and one
// that cannot (a developer worker, a warm pool's, one without its spec)
// stays running idle.
func (s *Spawner) Pause(ctx context.Context, id string) error {
	c, err := s.inst.find(ctx, id)
	if err != nil {
		return err
	}
	if c.State == engine.Suspended {
		return nil
	}
	if c.State != engine.Running {
		return errorf(protocol.CodeNotFound, "worker %s is not running", id)
	}
	busy, err := s.busyCheck.busy(ctx, id)
	if err != nil {
		return err
	}
	if busy != rdb.NotBusy {
		return errorf(protocol.CodeWorkerBusy, "worker %s is busy (%s): not paused", id, busy)
	}
	if !s.suspends() {
		return s.pauseUnfrozen(ctx, id)
	}
	if err := s.engine.Suspend(ctx, c.ID); err != nil {
		// Another pauser may have won the race: paused all the same.
		if st := s.inst.stateNow(ctx, id); st == engine.Suspended {
			return nil
		}
		return engineError(err, "pause worker %s", id)
	}
	if busy, err := s.busyCheck.busyNow(ctx, id); err != nil || busy != rdb.NotBusy {
		// A task arrived between the check and the freeze (or the check
		// cannot be made): thaw it.
		if err := s.engine.Resume(context.WithoutCancel(ctx), c.ID); err != nil {
			s.log.Warn("thaw a worker paused with a task", "worker_id", id, "err", err)
		}
		if err != nil {
			return err
		}
		return errorf(protocol.CodeWorkerBusy, "worker %s became busy (%s) as it was paused: woken again", id, busy)
	}
	s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerPaused),
		protocol.StatusFieldState: string(protocol.WorkerPaused)})
	s.lifecycle(ctx, id, protocol.EventPaused, nil)
	return nil
}

// pauseUnfrozen is Pause on an engine that cannot freeze, for an idle
// worker: hibernated if it can be, else left running.
func (s *Spawner) pauseUnfrozen(ctx context.Context, id string) error {
	h, err := s.rdb.Status(ctx, id)
	if err != nil {
		return redisError(err, "status of %s", id)
	}
	if !hibernatable(h) {
		return nil
	}
	return s.hib.hibernate(ctx, id, hibernatePaused, true)
}

// inputOf returns a worker's kind (long-lived when its hash says none),
// its input stream and that stream's consumer group.
func inputOf(keys protocol.Keys, id string, kind protocol.Kind) (protocol.Kind, string, string) {
	if kind == "" {
		kind = protocol.KindLongLived
	}
	return kind, keys.InputFor(kind, id), protocol.GroupFor(kind)
}

// Unpause wakes a paused worker. The engine is asked to unpause it at
// once (a wake-up makes one engine call); a worker that was not paused
// (another caller woke it first) is no error.
//
// The status says so before the engine call: the wrapper is frozen until
// then, so its state (paused -> idle, a transition) cannot race with its
// own next one (idle -> busy, as it takes the task that woke it).
func (s *Spawner) Unpause(ctx context.Context, id string) error {
	if !s.suspends() {
		_, err := s.inst.find(ctx, id) // nothing is frozen: a worker that exists runs
		return err
	}
	woke := s.wakeStatus(ctx, id)
	if err := s.engine.Resume(ctx, ContainerName(id)); err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			return noContainer(id)
		}
		st := s.inst.stateNow(ctx, id)
		if st != "" && st != engine.Suspended {
			return nil
		}
		if st != "" && woke {
			s.writeStatus(context.WithoutCancel(ctx), id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerPaused),
				protocol.StatusFieldState: string(protocol.WorkerPaused)})
		}
		return engineError(err, "unpause worker %s", id)
	}
	s.lifecycle(ctx, id, protocol.EventUnpaused, nil)
	return nil
}

// wakeStatus writes the status of a worker about to be unpaused: its
// container running and, if its status says paused, its state idle. It
// reports whether it changed the state.
func (s *env) wakeStatus(ctx context.Context, id string) bool {
	fields := map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning)}
	state, _ := s.rdb.StatusField(ctx, id, protocol.StatusFieldState)
	if state == string(protocol.WorkerPaused) {
		fields[protocol.StatusFieldState] = string(protocol.WorkerIdle)
	}
	s.writeStatus(ctx, id, fields)
	return state == string(protocol.WorkerPaused)
}

// suspends reports whether the engine freezes a paused worker (Docker)
// or cannot (Kubernetes: see Pause).
func (s *Spawner) suspends() bool { return s.engine == nil || s.engine.Suspends() }
