package spawner

import (
	"context"
	"encoding/json"
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
// moves on (see rdb.Admit). A create at the head of a full queue first
// takes the slot of a warm pool worker, then hibernates the long-lived
// worker idle or paused longest (unless KeepIdleAtLimit), and only then
// waits.

// admission admits this host's creates and wakes (admit), evicting a
// warm pool worker or the worker idle longest when the host is full.
type admission struct {
	*env
	cfg      *Config // CREATION_TIMEOUT, LEASE_TTL, MAX_CONCURRENT_WORKERS, HOST_LABELS, EVICT_IDLE_AFTER, POOLS
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
		cands, err := s.fleet.Candidates(ctx, p, o.forward == nil, s.cfg.MaxWorkers, s.cfg.HostLabels)
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
			if live, err := s.fleet.Live(ctx, adm.Host); err == nil && live {
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
		if adm.Pos == 0 && adm.Full && !s.cfg.KeepIdleAtLimit && s.evictIdlest(ctx, id) {
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

// evictIdlest hibernates the long-lived worker of this host idle or
// paused longest (at least EvictIdleAfter, with no task waiting) to free
// a slot for the create of forID, and says whether it did. A worker that
// cannot hibernate (no spec, a developer worker) keeps its slot: an
// eviction never ends an identity. The hibernation pauses the worker
// first and checks again that no task came (hibernate), so a task sent
// meanwhile keeps it.
func (s *admission) evictIdlest(ctx context.Context, forID string) bool {
	cs, err := s.engine.List(ctx, engine.Filter{})
	if err != nil {
		return false
	}
	now := s.now()
	victim, since := "", time.Time{}
	for _, c := range cs {
		id := c.Worker
		if id == "" || (c.State != engine.Running && c.State != engine.Suspended) {
			continue
		}
		h, err := s.rdb.Status(ctx, id)
		if err != nil || !hibernatable(h) || h[protocol.StatusFieldRequestID] != "" {
			continue
		}
		state := protocol.WorkerState(h[protocol.StatusFieldState])
		if state != protocol.WorkerIdle && state != protocol.WorkerPaused {
			continue
		}
		at, err := idleSince(h)
		if err != nil || now.Sub(at) < s.cfg.EvictIdleAfter {
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
	s.log.Info("at the worker limit: hibernating the worker idle longest", "worker_id", victim, "idle_for", now.Sub(since).String(), "for", forID)
	s.lifecycle(ctx, victim, protocol.EventStopping, map[string]any{"reason": "evicted", "idle_for_ms": now.Sub(since).Milliseconds(), "for_worker": forID})
	if err := s.hibernate(ctx, victim, hibernateEvicted, false); err != nil {
		s.log.Info("the worker idle longest was not hibernated", "worker_id", victim, "err", err)
		return false
	}
	return true
}

// idleSince is when a worker became idle or paused: its state's start
// (a pause starts one), or, without one, the status's last write.
func idleSince(h map[string]string) (time.Time, error) {
	if t, err := protocol.ParseTime(h[protocol.StatusFieldStateSince]); err == nil {
		return t, nil
	}
	return protocol.ParseTime(h[protocol.StatusFieldUpdatedAt])
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
