package spawner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// A wake backed by a warm pool: a hibernated worker whose spec is a
// pool's template takes a warm worker of that pool on its host, container
// and slot, instead of a new container. The warm worker has an identity
// of its own in four places, each handed over here without a secret
// leaving the container: its slot, placement and pool membership (one
// Lua step), its Redis user (the woken worker's is made with the warm
// one's password hash: the wrapper logs in as it with the password it
// holds), its gateway socket directory (renamed on the host; the bind
// mount follows it) and its container's name (which names the worker
// from then on: workerOf). The wrapper, sent an adopt document on the warm
// worker's input, re-executes itself as the woken worker.

// poolWake wakes hibernated workers into warm pool workers of this host.
type poolWake struct {
	*env
	poolFor func(spec protocol.WorkerSpec) *PoolTemplate
	users   *workerUsers
	seals   *sealing
	engine  engine.Engine
	// retire ends a woken worker whose adoption failed; ended answers one
	// deleted as it was woken.
	retire func(ctx context.Context, id string, r retirement) (bool, error)
	ended  func(ctx context.Context, id string)
	// adoptions are the warm workers whose leftovers a wake into them
	// will remove: Shutdown waits for them.
	adoptions sync.WaitGroup
}

// adoptedForgetAfter bounds the wait for the woken worker's first
// heartbeat before the warm worker's keys and Redis user are removed.
const adoptedForgetAfter = 30 * time.Second

// wakeIntoWarm wakes hibernated worker id (incarnation n) in a warm pool
// worker of this host. done false with no error: no warm worker of its
// spec was ready here, or workers have no Redis users of their own (an
// adoption is proven by a login as the woken worker's own user): the
// caller makes a container. done true: woken, or found woken or deleted
// by another meanwhile.
//
// The container and the gateway directory take the woken worker's name
// before the slot moves (the reconciler takes a container whose name and
// label differ for a hand-over under way), and take the warm worker's
// back when the slot does not move.
func (s *poolWake) wakeIntoWarm(ctx context.Context, id string, spec protocol.WorkerSpec, n int) (bool, error) {
	p := s.poolFor(spec)
	if p == nil || !s.users.aclMode(ctx) {
		return false, nil
	}
	warm, cid := s.readyWarm(ctx, p.Name)
	if warm == "" {
		return false, nil
	}
	w := &warmWake{id: id, warm: warm, cid: cid, pool: p.Name, sealed: s.seals.served()}
	if moved, done, err := s.handOver(ctx, w); !moved {
		return done, err
	}
	return s.adoptWarm(ctx, w, spec, n)
}

// warmWake is one wake into a warm pool worker.
type warmWake struct {
	id, warm string // the woken worker, the warm worker whose container it takes
	cid      string // the container
	pool     string
	sealed   bool // the gateway's socket directory is handed over too
	adopt    protocol.Adopt
}

// handOver gives w's container and gateway directory the woken worker's
// name, then moves the slot. moved: the slot moved, the wake goes on;
// otherwise the names are back and done and err are the wake's answer.
func (s *poolWake) handOver(ctx context.Context, w *warmWake) (moved, done bool, err error) {
	bg := context.WithoutCancel(ctx)
	putBack := func() { _ = s.rdb.AddWarm(bg, w.pool, w.warm) }
	var credentialHosts []string // the woken worker's: a credential may be for some workers only
	if w.sealed {
		s.seals.close(ctx, w.id) // a directory of an earlier incarnation left open
		info, err := s.seals.gw.Rename(ctx, w.warm, w.id)
		if err != nil {
			putBack()
			return false, false, errorf(protocol.CodeUpstreamUnavailable, "the gateway did not rename %s's sockets: %v", w.warm, err)
		}
		credentialHosts = info.CredentialHosts
	}
	undoGateway := func() {
		if w.sealed {
			_, _ = s.seals.gw.Rename(bg, w.id, w.warm)
		}
	}
	w.adopt = protocol.Adopt{WorkerID: w.id, RedisUser: s.rdb.WorkerUser(w.id), CredentialHosts: credentialHosts}
	if err := w.adopt.Validate(); err != nil {
		// The wrapper would refuse it: a container is made instead.
		s.log.Warn("no wake into a warm pool worker: its adopt document does not validate", "worker_id", w.id, "err", err)
		undoGateway()
		putBack()
		return false, false, nil
	}
	if err := s.engine.Rename(ctx, w.cid, w.id); err != nil {
		undoGateway()
		putBack()
		return false, false, engineError(err, "rename the container of %s", w.warm)
	}
	undoNames := func() {
		_ = s.engine.Rename(bg, w.cid, w.warm)
		undoGateway()
	}
	switch got, err := s.rdb.WakeIntoWarm(ctx, s.Host(), w.id, w.warm, w.pool); {
	case err != nil:
		undoNames()
		putBack()
		return false, false, redisError(err, "wake %s into %s", w.id, w.warm)
	case got == 0:
		undoNames()
		putBack() // woken or deleted meanwhile
		return false, true, nil
	case got < 0:
		undoNames()
		return false, false, nil // the warm worker was retired meanwhile: a container is made
	}
	return true, false, nil
}

// adoptWarm makes the container the slot moved to the woken worker's:
// its Redis user, its status, the container thawed and the adopt
// document sent to the wrapper. On a failure the container is removed
// and the worker retired as after a start that failed (a new incarnation
// follows), the warm worker's leftovers forgotten.
func (s *poolWake) adoptWarm(ctx context.Context, w *warmWake, spec protocol.WorkerSpec, n int) (bool, error) {
	bg := context.WithoutCancel(ctx)
	start := s.now()
	fail := func(err error) (bool, error) {
		s.log.Warn("a wake into a warm pool worker failed", "worker_id", w.id, "warm_worker_id", w.warm, "err", err)
		_ = s.engine.Remove(bg, w.cid)
		s.forgetWarm(bg, w.warm)
		if _, rerr := s.retire(bg, w.id, retirement{reason: protocol.RemovedStuck, died: true, exitCode: -1, code: protocol.CodeInternalError,
			msg: err.Error(), replace: true, unasked: true}); rerr != nil {
			s.log.Warn("retire a worker whose wake into a warm pool worker failed", "worker_id", w.id, "err", rerr)
		}
		return true, err
	}
	if err := s.rdb.CopyWorkerUser(ctx, w.warm, w.id, rdb.ScopeOf(spec)); err != nil {
		return fail(redisError(err, "the Redis user of %s", w.id))
	}
	s.writeStatus(ctx, w.id, map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerStarting), protocol.StatusFieldContainer: string(protocol.ContainerRunning),
		protocol.StatusFieldHealth: string(protocol.HealthHealthy), protocol.StatusFieldIncarnation: n,
		protocol.StatusFieldIncarnatedAt: protocol.FormatTime(start), protocol.StatusFieldReplacements: 0,
		protocol.StatusFieldContainerID: w.cid, protocol.StatusFieldHost: s.Host(), protocol.StatusFieldError: ""})
	if member, err := s.rdb.IsWorker(ctx, w.id); err == nil && !member {
		// Deleted since the slot moved: the delete found no container.
		_ = s.engine.Remove(bg, w.cid)
		s.forgetWarm(bg, w.warm)
		s.ended(ctx, w.id)
		return true, nil
	}
	if err := s.engine.Resume(ctx, w.cid); err != nil {
		if c, ierr := s.engine.Inspect(ctx, w.cid); ierr != nil || c.State != engine.Running {
			return fail(engineError(err, "unpause the container of %s", w.warm))
		} // running already (never paused, or unpaused by another)
	}
	doc, err := w.adopt.Encode()
	if err == nil {
		err = s.rdb.AddEntry(ctx, s.keys.Input(w.warm), doc)
	}
	if err != nil {
		return fail(redisError(err, "adopt %s", w.warm))
	}
	s.lifecycle(ctx, w.id, protocol.EventCreated, map[string]any{"container_id": w.cid, "incarnation": n, "pool": w.pool, "warm_worker_id": w.warm})
	s.log.Info("hibernated worker woken in a warm pool worker", "worker_id", w.id, "incarnation", n, "pool", w.pool, "warm_worker_id", w.warm)
	s.adoptions.Add(1)
	go func() {
		defer s.adoptions.Done()
		s.forgetAdopted(w.id, w.warm)
	}()
	return true, nil
}

// readyWarm takes a warm worker of pool that is this host's, not
// degraded, whose container is there: its id and container id ("" when
// none). Another host's is put back.
func (s *poolWake) readyWarm(ctx context.Context, pool string) (id, cid string) {
	var back []string
	defer func() {
		for _, b := range back {
			_ = s.rdb.AddWarm(context.WithoutCancel(ctx), pool, b)
		}
	}()
	for {
		w, err := s.rdb.TakeWarm(ctx, pool)
		if err != nil || w == "" {
			return "", ""
		}
		if rt, err := s.fleet.Route(ctx, w); err != nil || !rt.Here {
			back = append(back, w)
			continue
		}
		if health, _ := s.rdb.StatusField(ctx, w, protocol.StatusFieldHealth); health == string(protocol.HealthDegraded) {
			back = append(back, w)
			continue
		}
		c, err := s.engine.Inspect(ctx, ContainerName(w))
		switch {
		case errors.Is(err, engine.ErrNotFound):
			continue // gone: its retirement is the crash watcher's
		case err != nil || !c.State.Up():
			back = append(back, w) // the engine did not answer, or it is not up yet: left in the pool
			return "", ""
		}
		return w, c.ID
	}
}

// forgetAdopted removes what is left of a warm worker whose container a
// woken worker took, once that worker beats (its wrapper re-executed as
// it) or adoptedForgetAfter has passed.
//
// It is not cut short at shutdown (Shutdown waits for it, through
// adoptions): the warm worker's input holds the adopt document until the
// wrapper read it, and removing it sooner would strand the woken worker.
// Its own timeout bounds it.
func (s *poolWake) forgetAdopted(id, warm string) {
	ctx, cancel := context.WithTimeout(context.Background(), adoptedForgetAfter+5*time.Second)
	defer cancel()
	wait, waitCancel := context.WithTimeout(ctx, adoptedForgetAfter)
	defer waitCancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
beat:
	for {
		if b, err := s.rdb.HasHeartbeat(wait, id); err == nil && b {
			break
		}
		select {
		case <-wait.Done():
			break beat // waited long enough: forget it all the same
		case <-tick.C:
		}
	}
	s.forgetWarm(ctx, warm)
}

// forgetWarm removes a warm worker's keys and Redis user, and its
// gateway directory when it still has one (its identity ended without a
// retirement: a woken worker took its container).
func (s *poolWake) forgetWarm(ctx context.Context, warm string) {
	if err := s.users.drop(ctx, warm); err != nil {
		s.log.Warn("the Redis user of an adopted warm worker was not deleted (the reconciler will)", "warm_worker_id", warm, "err", err)
	}
	s.seals.close(ctx, warm)
	s.rdb.ForgetWorkerKeys(ctx, warm)
}
