package spawner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Admission: a create waits in the creation queue, a Redis FIFO, until it
// is at its head and fewer than MaxWorkers slots are used (workers,
// admitted creates, workers being retired), or until CreationTimeout:
// then RESOURCE_EXHAUSTED. Its place in the queue and then its slot are
// leases that this process renews; if it dies, they run out and the queue
// moves on (see rdb.Admit). With EvictPaused, a create at the head of a
// full queue retires the worker paused longest instead of waiting.

// admission admits this host's creates and wakes (admit), evicting a
// warm pool worker or the worker paused longest when the host is full.
type admission struct {
	*env
	cfg      *Config // CREATION_TIMEOUT, LEASE_TTL, MAX_CONCURRENT_WORKERS, HOST_LABELS, EVICT_PAUSED(_AFTER), POOLS
	stopping <-chan struct{}
	engine   engine.Engine
	busy     *busyCheck
	// retire and hibernate free a slot: the Spawner's.
	retire    func(ctx context.Context, id string, r retirement) (bool, error)
	hibernate func(ctx context.Context, id, reason string, graceful bool) error
}

// admit waits for a slot for the create id on a host its placement
// allows (only this one when the create cannot be forwarded) and returns
// the host. On this host it returns the slot's lease, renewed until
// stopped; on another it returns no lease: the caller forwards the create,
// and that host's manager admits it again (renewing the same slot).
func (s *admission) admit(ctx context.Context, id string, p *protocol.Placement, o createOpts) (*renewal, string, error) {
	me := s.Host()
	deadline := s.now().Add(s.cfg.CreationTimeout)
	queued := false
	mode := rdb.AdmitQueue
	switch {
	case o.tryOnly:
		mode = rdb.AdmitTry
	case o.replacement && !o.hostLost:
		mode = rdb.AdmitReplace
	}
	leave := func() { _ = s.rdb.Leave(context.WithoutCancel(ctx), id) }
	for {
		cands, err := s.fleet.candidates(ctx, p, o.forward == nil, s.cfg.MaxWorkers, s.cfg.HostLabels)
		if err != nil {
			return nil, "", redisError(err, "fleet hosts")
		}
		if len(cands) == 0 && mode != rdb.AdmitReplace {
			leave()
			return nil, "", errorf(protocol.CodeNoHost, "no live host matches the placement %s", placementString(p))
		}
		adm, err := s.rdb.Admit(ctx, id, s.now(), s.cfg.LeaseTTL, mode, me, cands)
		if err != nil {
			return nil, "", redisError(err, "creation queue")
		}
		if adm.OK {
			if adm.Host == me {
				return s.keepSlot(id), me, nil
			}
			if live, err := s.fleet.live(ctx, adm.Host); err == nil && live {
				return nil, adm.Host, nil
			}
			leave() // placed on a host lost since: placed again
			continue
		}
		if mode == rdb.AdmitTry {
			return nil, "", errorf(protocol.CodeResourceExhausted, "no free slot without taking one a queued create waits for")
		}
		if adm.Pos == 0 && adm.Full && s.evictWarm(ctx, id) {
			continue // a warm pool worker gave way: count again at once
		}
		if adm.Pos == 0 && adm.Full && s.cfg.EvictPaused && s.evictOldestPaused(ctx, id) {
			continue // count again at once
		}
		if !queued {
			queued = true
			s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerQueued),
				protocol.StatusFieldState: string(protocol.WorkerStarting)})
			s.lifecycle(ctx, id, protocol.EventQueued, map[string]any{"max_workers": s.cfg.MaxWorkers, "position": adm.Pos, "hosts": len(cands)})
		}
		if s.now().After(deadline) {
			leave()
			return nil, "", errorf(protocol.CodeResourceExhausted, "no worker slot freed within %s on %d host(s) (MAX_CONCURRENT_WORKERS=%d here)", s.cfg.CreationTimeout, len(cands), s.cfg.MaxWorkers)
		}
		select {
		case <-ctx.Done():
			leave()
			return nil, "", &Error{Code: protocol.CodeResourceExhausted, Err: ctx.Err()}
		case <-s.stopping:
			leave()
			return nil, "", errorf(protocol.CodeShuttingDown, "the worker-manager is shutting down: send the create again")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// placementString shows a placement in an error.
func placementString(p *protocol.Placement) string {
	if p == nil {
		return "(any host)"
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// keepSlot renews the slot lease of an admitted create every third of the
// lease, until stopped (or until the create joined the workers set or lost
// its lease).
func (s *admission) keepSlot(id string) *renewal {
	return renewEvery(context.Background(), s.cfg.LeaseTTL/3, func(ctx context.Context) bool {
		ok, err := s.rdb.RenewCreating(ctx, id, s.now(), s.cfg.LeaseTTL)
		return err != nil || ok
	})
}

// evictOldestPaused hibernates (or, one that cannot hibernate, retires)
// the worker paused longest (at least
// EvictPausedAfter, with no task waiting) to free a slot for the create
// of forID, and says whether it did.
func (s *admission) evictOldestPaused(ctx context.Context, forID string) bool {
	cs, err := s.engine.List(ctx, engine.Filter{State: engine.Suspended})
	if err != nil {
		return false
	}
	now := s.now()
	victim, since := "", time.Time{}
	for _, c := range cs {
		id := c.Worker
		if id == "" {
			continue
		}
		at, err := s.rdb.PausedSince(ctx, id)
		if err != nil || now.Sub(at) < s.cfg.EvictPausedAfter {
			continue
		}
		if b, err := s.busy.busyNow(ctx, id); err != nil || b != "" {
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
	if h, err := s.rdb.Status(ctx, victim); err == nil && hibernatable(h) {
		// Its identity stays: hibernated, woken by its next task.
		err := s.hibernate(ctx, victim, hibernateEvicted, false)
		if err != nil {
			s.log.Warn("evict a paused worker", "worker_id", victim, "err", err)
		}
		return err == nil
	}
	done, err := s.retire(ctx, victim, retirement{reason: protocol.RemovedEvicted, graceful: true, code: protocol.CodeTerminated,
		msg: fmt.Sprintf("the worker was evicted for %s before it ran this task", forID)})
	if err != nil {
		s.log.Warn("evict a paused worker", "worker_id", victim, "err", err)
	}
	return done && err == nil
}

// evictWarm retires a warm worker of any pool so that the create forID,
// at the head of a full queue, gets its slot; it says whether it did.
func (s *admission) evictWarm(ctx context.Context, forID string) bool {
	for _, p := range s.cfg.Pools {
		id, err := s.rdb.TakeWarm(ctx, p.Name)
		if err != nil || id == "" {
			continue
		}
		s.log.Info("at the worker limit: a warm pool worker gives way", "pool", p.Name, "worker_id", id, "for", forID)
		if ok, err := s.retire(ctx, id, retirement{reason: protocol.RemovedGaveWay, graceful: true, code: protocol.CodeTerminated,
			msg: "the warm worker gave way to a create"}); err == nil && ok {
			return true
		}
	}
	return false
}
