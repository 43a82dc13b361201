package spawner

import (
	"context"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// HostPresence keeps this host live in the fleet's registry, every
// quarter of HostTTL, on every manager; a manager that stops cleanly
// takes its host out of placement (another manager of the same host puts
// it back within a quarter of HostTTL).
type HostPresence struct {
	job
	hostPresenceParams
	engine string // the engine's name, as the registry shows it
}

// hostPresenceParams is what HostPresence is built from.
type hostPresenceParams struct {
	*env
	ttl        time.Duration // HOST_TTL
	maxWorkers int           // this host's slots
	labels     map[string]string
	info       func(ctx context.Context) (engine.Info, error) // the engine's (nil: none)
}

func newHostPresence(p hostPresenceParams) *HostPresence { return &HostPresence{hostPresenceParams: p} }

// Start renews the host once before it returns (a manager is in
// placement before it reads a create: one read by another host's manager
// meanwhile would find no live host to place it on), then until Stop.
func (p *HostPresence) Start(ctx context.Context) {
	if p.info != nil {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if info, err := p.info(ictx); err == nil {
			p.engine = info.Name
		}
		cancel()
	}
	p.renew(ctx)
	p.start(ctx, p.run)
}

func (p *HostPresence) run(ctx context.Context) {
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.rdb.LeaveHosts(dctx, p.Host())
	}()
	t := time.NewTicker(max(p.ttl/4, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.renew(ctx)
		}
	}
}

// renew marks this host live for HostTTL.
func (p *HostPresence) renew(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, p.ttl/4+time.Second)
	defer cancel()
	if err := p.rdb.RenewHost(ctx, p.Host(), p.now(), p.ttl, p.maxWorkers, p.labels, p.engine); err != nil && ctx.Err() == nil {
		p.log.Warn("host not renewed in the fleet's registry", "host", p.Host(), "err", err)
	}
}

// HostWatch finds lost hosts, on every manager, every quarter of HostTTL:
// a host whose managers stopped renewing it. The manager that takes the
// host's loss lease moves the commands and control requests forwarded to
// it that its managers had not acknowledged back to the shared streams
// (where they are served again: a create placed elsewhere, an action on a
// worker of a lost host answered; one it had served is not), and
// retires its workers that are dead: paused ones (no manager can wake
// them) and those whose heartbeat is older than one and a half intervals.
// A worker still beating on a host whose managers are gone is left to run
// until its managers return or its heartbeat stops. A manager judges no
// host in its first HOST_TTL (a fleet restarting whole loses nothing).
type HostWatch struct {
	job
	hostWatchParams

	mu      sync.Mutex
	judged  map[string]bool // retirements under way; guarded by mu
	retires sync.WaitGroup
}

// hostWatchParams is what HostWatch is built from.
type hostWatchParams struct {
	*env
	workers   retirer
	leases    leases
	hostTTL   time.Duration // HOST_TTL: a host not renewed for as long is lost
	heartbeat time.Duration // the workers' heartbeat interval
}

func newHostWatch(p hostWatchParams) *HostWatch { return &HostWatch{hostWatchParams: p} }

// Start watches until Stop.
func (w *HostWatch) Start(ctx context.Context) {
	w.judged = map[string]bool{}
	w.start(ctx, w.run)
}

// Stop stops watching and waits for the retirements it began.
func (w *HostWatch) Stop() {
	w.job.Stop()
	w.retires.Wait()
}

func (w *HostWatch) run(ctx context.Context) {
	// A manager judges no host before it has watched for one HOST_TTL:
	// when a whole fleet restarts, the others have renewed their hosts by
	// then.
	since := w.now()
	every(ctx, max(w.hostTTL/4, 50*time.Millisecond), func(ctx context.Context) {
		if w.now().Sub(since) < w.hostTTL {
			return
		}
		hosts, err := w.rdb.Hosts(ctx)
		if err != nil {
			return
		}
		now := w.now()
		for _, h := range hosts {
			if h.ID == w.Host() || h.Live(now) {
				continue
			}
			ok, err := w.leases.take(ctx, ctlplane.HostLossLease(h.ID))
			if err != nil || !ok {
				continue
			}
			w.lost(ctx, h)
		}
	})
}

// lost handles one lost host (see HostWatch).
func (w *HostWatch) lost(ctx context.Context, h rdb.HostInfo) {
	if h.LostAt.IsZero() {
		w.log.Warn("host lost: its managers stopped renewing it", "host", h.ID, "live_until", h.LiveUntil)
		_ = w.rdb.MarkHostLost(ctx, h.ID, w.now())
	}
	for _, pair := range [][2]string{{w.keys.HostCommands(h.ID), w.keys.Commands()}, {w.keys.HostControl(h.ID), w.keys.Control()}} {
		if n, err := w.rdb.Drain(ctx, pair[0], pair[1], protocol.ManagerGroup); err != nil {
			w.log.Warn("move a lost host's entries back", "host", h.ID, "stream", pair[0], "err", err)
		} else if n > 0 {
			w.log.Info("entries of a lost host moved back to the shared stream", "host", h.ID, "stream", pair[1], "count", n)
		}
	}
	// Its hibernated workers have no container to lose: this host wakes
	// them from now on.
	if ids, err := w.rdb.Adopt(ctx, h.ID, w.Host()); err != nil {
		w.log.Warn("adopt a lost host's hibernated workers", "host", h.ID, "err", err)
	} else if len(ids) > 0 {
		w.log.Info("hibernated workers of a lost host adopted", "host", h.ID, "workers", len(ids))
	}
	placed, err := w.rdb.Placements(ctx)
	if err != nil {
		return
	}
	workers, _, _, err := w.rdb.Slots(ctx)
	if err != nil {
		return
	}
	member := map[string]bool{}
	for _, id := range workers {
		member[id] = true
	}
	stale, _ := w.rdb.StaleRetirements(ctx, w.now())
	staleSet := map[string]bool{}
	for _, id := range stale {
		staleSet[id] = true
	}
	left := 0
	for id, host := range placed {
		if host != h.ID {
			continue
		}
		left++
		switch {
		case member[id]:
			if w.dead(ctx, id) {
				w.retire(ctx, id, h.ID, retirement{reason: protocol.RemovedHostLost, died: true, exitCode: -1, code: protocol.CodeHostLost,
					msg: "the worker's host " + h.ID + " was lost", replace: true, hostLost: true})
			}
		case staleSet[id]:
			// A retirement its host's manager began and never finished.
			w.retire(ctx, id, h.ID, retirement{reason: protocol.RemovedTakeover, died: true, exitCode: -1, code: protocol.CodeHostLost,
				msg: "the worker's host " + h.ID + " was lost", hostLost: true})
		}
	}
	if left == 0 {
		_ = w.rdb.ForgetHost(ctx, h.ID) // nothing of it left: it rejoins when its managers return
	}
}

// dead reports whether a worker of a lost host is dead: paused (nothing
// can wake it) or not beating.
func (w *HostWatch) dead(ctx context.Context, id string) bool {
	st, err := w.rdb.Status(ctx, id)
	if err != nil {
		return false
	}
	if st[protocol.StatusFieldContainer] == string(protocol.ContainerPaused) {
		return true
	}
	doc, err := w.rdb.Heartbeat(ctx, id)
	if err != nil {
		return false
	}
	if doc == nil {
		return true
	}
	hb, err := protocol.DecodeHeartbeat(doc)
	return err != nil || !beatFresh(hb, w.now(), w.heartbeat)
}

// retire retires a worker of a lost host in the background, once.
func (w *HostWatch) retire(ctx context.Context, id, host string, r retirement) {
	w.mu.Lock()
	if w.judged[id] {
		w.mu.Unlock()
		return
	}
	w.judged[id] = true
	w.mu.Unlock()
	if r.reason == protocol.RemovedHostLost {
		w.lifecycleOn(ctx, host, id, protocol.EventHostLost, map[string]any{"host": host})
	}
	w.retires.Add(1)
	go func() {
		defer w.retires.Done()
		defer func() { w.mu.Lock(); delete(w.judged, id); w.mu.Unlock() }()
		if _, err := w.workers.retire(ctx, id, r); err != nil {
			w.log.Warn("retire a worker of a lost host", "worker_id", id, "host", host, "err", err)
		}
	}()
}
