package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Timeouts pauses a worker idle longer than IdleTimeout (through Pause,
// so never one with a task; a pool's worker after its pool's
// idle_timeout), and hibernates one idle (running or paused) longer than
// HibernateAfter or paused longer than PauseTimeout (one that cannot
// hibernate, such as a developer worker, is retired), save a
// pool's warm worker, which is paused on purpose while it waits for a
// create. It runs on the leader.
type Timeouts struct {
	job
	timeoutsParams
}

// timeoutsParams is what Timeouts is built from.
type timeoutsParams struct {
	*env
	workers retirer
	pause   func(ctx context.Context, id string) error // Spawner.Pause
	// hibernate hibernates an idle worker with a reason (Spawner.hibernate).
	hibernateWorker func(ctx context.Context, id, reason string) error
	interval        time.Duration            // how often every worker is checked
	idle            time.Duration            // IDLE_TIMEOUT
	paused          time.Duration            // PAUSE_TIMEOUT
	hibernateAfter  time.Duration            // HIBERNATE_AFTER (0: only the pause timeout hibernates)
	poolIdle        map[string]time.Duration // a pool's idle_timeout, by pool name
	// noFreeze says the engine cannot freeze (its Suspends is false):
	// then a worker that cannot hibernate is not paused but retired once
	// idle past its idle and pause timeouts together.
	noFreeze bool
}

func newTimeouts(p timeoutsParams) *Timeouts { return &Timeouts{timeoutsParams: p} }

// Start checks until Stop.
func (t *Timeouts) Start(ctx context.Context) { t.start(ctx, t.run) }

func (t *Timeouts) run(ctx context.Context) {
	every(ctx, t.interval, func(ctx context.Context) {
		ids, err := t.ownWorkers(ctx)
		if err != nil {
			return
		}
		sts, _, err := t.rdb.StatusFields(ctx, ids, timeoutFields, false)
		if err != nil {
			return
		}
		for i, id := range ids {
			if ctx.Err() != nil {
				return
			}
			t.check(ctx, id, sts[i])
		}
	})
}

// timeoutFields are the fields of a worker's status hash that check reads.
var timeoutFields = []string{protocol.StatusFieldContainer, protocol.StatusFieldState, protocol.StatusFieldUpdatedAt,
	protocol.StatusFieldPool, protocol.StatusFieldPoolState, protocol.StatusFieldKind, protocol.StatusFieldSpec}

// check pauses or retires one worker past its timeout, from its status
// fields (timeoutFields).
func (t *Timeouts) check(ctx context.Context, id string, h map[string]string) {
	updated, err := protocol.ParseTime(h[protocol.StatusFieldUpdatedAt])
	if err != nil || updated.IsZero() {
		return
	}
	since := t.now().Sub(updated)
	idleAfter := t.idle
	if d := t.poolIdle[h[protocol.StatusFieldPool]]; d > 0 {
		idleAfter = d
	}
	paused := h[protocol.StatusFieldContainer] == string(protocol.ContainerPaused)
	idle := h[protocol.StatusFieldContainer] == string(protocol.ContainerRunning) && h[protocol.StatusFieldState] == string(protocol.WorkerIdle)
	if t.noFreeze && idle && !hibernatable(h) {
		// It would have been paused at idleAfter: it counts as paused since.
		idle, paused, since = false, since > idleAfter, since-idleAfter
	}
	switch {
	case h[protocol.StatusFieldPoolState] == protocol.PoolWarm:
		// Waiting for a create: its pool pauses it and keeps it.
	case hibernatable(h) && t.hibernateAfter > 0 && (paused || idle) && since > t.hibernateAfter:
		t.hibernate(ctx, id, hibernateIdle)
	case hibernatable(h) && paused && since > t.paused:
		t.hibernate(ctx, id, hibernatePauseTimeout)
	case paused && since > t.paused:
		t.log.Info("paused past the pause timeout: retiring", "worker_id", id)
		t.lifecycle(ctx, id, protocol.EventStopping, map[string]any{"reason": "pause_timeout"})
		if _, err := t.workers.retire(ctx, id, retirement{reason: protocol.RemovedPauseTimeout, graceful: true, code: protocol.CodeTerminated,
			msg: "the worker was retired after its pause timeout before it ran this task"}); err != nil {
			t.log.Warn("retire after the pause timeout", "worker_id", id, "err", err)
		}
	case idle && since > idleAfter:
		if err := t.pause(ctx, id); err != nil && !IsBusy(err) && !IsNotFound(err) {
			t.log.Warn("pause after the idle timeout", "worker_id", id, "err", err)
		} else if err == nil {
			t.log.Info("idle past the idle timeout: paused", "worker_id", id)
		}
	}
}

// hibernate hibernates one idle worker past a timeout.
func (t *Timeouts) hibernate(ctx context.Context, id, reason string) {
	if err := t.hibernateWorker(ctx, id, reason); err != nil && !IsBusy(err) && !IsNotFound(err) {
		t.log.Warn("hibernate an idle worker", "worker_id", id, "reason", reason, "err", err)
	}
}
