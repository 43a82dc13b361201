package spawner

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentvisor/agentvisor/protocol"
)

// Admission: a create waits in the creation queue, a Redis FIFO, until it
// is at its head and fewer than MaxWorkers slots are used (workers,
// admitted creates, workers being retired), or until CreationTimeout:
// then RESOURCE_EXHAUSTED. Its place in the queue and then its slot are
// leases that this process renews; if it dies, they run out and the queue
// moves on (see rdb.Admit). With EvictPaused, a create at the head of a
// full queue retires the worker paused longest instead of waiting.

// slotLease is an admitted create's slot, renewed until stop.
type slotLease struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *slotLease) stop() { l.cancel(); <-l.done }

// admit waits for a slot for the create id and returns its lease.
func (s *Spawner) admit(ctx context.Context, id string, replacement bool) (*slotLease, error) {
	deadline := s.now().Add(s.cfg.CreationTimeout)
	queued := false
	for {
		ok, used, pos, err := s.rdb.Admit(ctx, id, s.now(), s.cfg.LeaseTTL, s.cfg.MaxWorkers, replacement)
		if err != nil {
			return nil, redisError(err, "creation queue")
		}
		if ok {
			return s.keepSlot(id), nil
		}
		if pos == 0 && used >= s.cfg.MaxWorkers && s.evictWarm(ctx, id) {
			continue // a warm pool worker gave way: count again at once
		}
		if pos == 0 && used >= s.cfg.MaxWorkers && s.cfg.EvictPaused && s.evictOldestPaused(ctx, id) {
			continue // count again at once
		}
		if !queued {
			queued = true
			s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerQueued),
				protocol.StatusFieldState: string(protocol.WorkerStarting)})
			s.lifecycle(ctx, id, protocol.EventQueued, map[string]any{"max_workers": s.cfg.MaxWorkers, "position": pos})
		}
		if s.now().After(deadline) {
			_ = s.rdb.Leave(context.WithoutCancel(ctx), id)
			return nil, errorf(protocol.CodeResourceExhausted, "no worker slot freed within %s (MAX_CONCURRENT_WORKERS=%d)", s.cfg.CreationTimeout, s.cfg.MaxWorkers)
		}
		select {
		case <-ctx.Done():
			_ = s.rdb.Leave(context.WithoutCancel(ctx), id)
			return nil, &Error{protocol.CodeResourceExhausted, ctx.Err()}
		case <-s.stopping:
			_ = s.rdb.Leave(context.WithoutCancel(ctx), id)
			return nil, errorf(protocol.CodeShuttingDown, "the worker-manager is shutting down: send the create again")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tryAdmit admits the create id at once, or fails RESOURCE_EXHAUSTED when
// a create waits or no slot is free: pools give way to explicit creates.
func (s *Spawner) tryAdmit(ctx context.Context, id string) (*slotLease, error) {
	ok, err := s.rdb.TryAdmit(ctx, id, s.now(), s.cfg.LeaseTTL, s.cfg.MaxWorkers)
	if err != nil {
		return nil, redisError(err, "creation queue")
	}
	if !ok {
		return nil, errorf(protocol.CodeResourceExhausted, "no free slot without taking one a queued create waits for")
	}
	return s.keepSlot(id), nil
}

// keepSlot renews the slot lease of an admitted create every third of the
// lease, until stopped.
func (s *Spawner) keepSlot(id string) *slotLease {
	ctx, cancel := context.WithCancel(context.Background())
	l := &slotLease{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(s.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ok, err := s.rdb.RenewCreating(ctx, id, s.now(), s.cfg.LeaseTTL); err == nil && !ok {
					return // joined the workers set, or the lease is lost
				}
			}
		}
	}()
	return l
}

// evictOldestPaused retires the worker paused longest (at least
// EvictPausedAfter, with no task waiting) to free a slot for the create
// of forID, and says whether it did.
func (s *Spawner) evictOldestPaused(ctx context.Context, forID string) bool {
	f := s.managedFilter()
	f.Add("status", "paused")
	cs, err := s.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return false
	}
	now := s.now()
	victim, since := "", time.Time{}
	for _, c := range cs {
		id := c.Labels[protocol.LabelWorkerID]
		if id == "" {
			continue
		}
		at, err := s.rdb.PausedSince(ctx, id)
		if err != nil || now.Sub(at) < s.cfg.EvictPausedAfter {
			continue
		}
		if b, err := s.busy(ctx, id); err != nil || b != "" {
			continue
		}
		if victim == "" || at.Before(since) {
			victim, since = id, at
		}
	}
	if victim == "" {
		return false
	}
	s.log.Info("at the worker limit: evicting the worker paused longest", "worker_id", victim, "paused_for", now.Sub(since).String(), "for", forID)
	s.lifecycle(ctx, victim, protocol.EventStopping, map[string]any{"reason": "evicted", "paused_for_ms": now.Sub(since).Milliseconds(), "for_worker": forID})
	done, err := s.retire(ctx, victim, retirement{reason: "evicted", graceful: true, code: protocol.CodeTerminated,
		msg: fmt.Sprintf("the worker was evicted for %s before it ran this task", forID)})
	if err != nil {
		s.log.Warn("evict a paused worker", "worker_id", victim, "err", err)
	}
	return done && err == nil
}
