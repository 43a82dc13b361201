package spawner

import (
	"context"
	"errors"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
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
func (s *Spawner) wakeIntoWarm(ctx context.Context, id string, spec protocol.WorkerSpec, n int) (bool, error) {
	p := s.poolFor(spec)
	if p == nil || !s.users.aclMode(ctx) {
		return false, nil
	}
	host := s.Host()
	warm, cid := s.readyWarm(ctx, p.Name)
	if warm == "" {
		return false, nil
	}
	bg := context.WithoutCancel(ctx)
	putBack := func() { _ = s.rdb.AddWarm(bg, p.Name, warm) }
	sealed := s.sealed() && s.gateway != nil
	var credentialHosts []string // the woken worker's: a credential may be for some workers only
	if sealed {
		s.closeSealed(ctx, id) // a directory of an earlier incarnation left open
		info, err := s.gateway.Rename(ctx, warm, id)
		if err != nil {
			putBack()
			return false, errorf(protocol.CodeUpstreamUnavailable, "the gateway did not rename %s's sockets: %v", warm, err)
		}
		credentialHosts = info.CredentialHosts
	}
	adopt := protocol.Adopt{WorkerID: id, RedisUser: s.rdb.WorkerUser(id), CredentialHosts: credentialHosts}
	if err := adopt.Validate(); err != nil {
		// The wrapper would refuse it: a container is made instead.
		s.log.Warn("no wake into a warm pool worker: its adopt document does not validate", "worker_id", id, "err", err)
		if sealed {
			_, _ = s.gateway.Rename(bg, id, warm)
		}
		putBack()
		return false, nil
	}
	undoNames := func() {
		_ = s.engine.Rename(bg, cid, warm)
		if sealed {
			_, _ = s.gateway.Rename(bg, id, warm)
		}
	}
	if err := s.engine.Rename(ctx, cid, id); err != nil {
		if sealed {
			_, _ = s.gateway.Rename(bg, id, warm)
		}
		putBack()
		return false, engineError(err, "rename the container of %s", warm)
	}
	switch got, err := s.rdb.WakeIntoWarm(ctx, host, id, warm, p.Name); {
	case err != nil:
		undoNames()
		putBack()
		return false, redisError(err, "wake %s into %s", id, warm)
	case got == 0:
		undoNames()
		putBack() // woken or deleted meanwhile
		return true, nil
	case got < 0:
		undoNames()
		return false, nil // the warm worker was retired meanwhile: a container is made
	}
	// From here the container is the woken worker's; on a failure it is
	// removed and the worker retired as after a start that failed (a new
	// incarnation follows), the warm worker's leftovers forgotten.
	start := s.now()
	fail := func(err error) (bool, error) {
		s.log.Warn("a wake into a warm pool worker failed", "worker_id", id, "warm_worker_id", warm, "err", err)
		_ = s.engine.Remove(bg, cid)
		s.forgetWarm(bg, warm)
		if _, rerr := s.retire(bg, id, retirement{reason: protocol.RemovedStuck, died: true, exitCode: -1, code: protocol.CodeInternalError,
			msg: err.Error(), replace: true, unasked: true}); rerr != nil {
			s.log.Warn("retire a worker whose wake into a warm pool worker failed", "worker_id", id, "err", rerr)
		}
		return true, err
	}
	if err := s.rdb.CopyWorkerUser(ctx, warm, id, spec.Kind); err != nil {
		return fail(redisError(err, "the Redis user of %s", id))
	}
	s.writeStatus(ctx, id, map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerStarting), protocol.StatusFieldContainer: string(protocol.ContainerRunning),
		protocol.StatusFieldHealth: string(protocol.HealthHealthy), protocol.StatusFieldIncarnation: n,
		protocol.StatusFieldIncarnatedAt: protocol.FormatTime(start), protocol.StatusFieldReplacements: 0,
		protocol.StatusFieldContainerID: cid, protocol.StatusFieldHost: host, protocol.StatusFieldError: ""})
	if member, err := s.rdb.IsWorker(ctx, id); err == nil && !member {
		// Deleted since the slot moved: the delete found no container.
		_ = s.engine.Remove(bg, cid)
		s.forgetWarm(bg, warm)
		s.ended(ctx, id)
		return true, nil
	}
	if err := s.engine.Resume(ctx, cid); err != nil {
		if c, ierr := s.engine.Inspect(ctx, cid); ierr != nil || c.State != engine.Running {
			return fail(engineError(err, "unpause the container of %s", warm))
		} // running already (never paused, or unpaused by another)
	}
	doc, err := adopt.Encode()
	if err == nil {
		err = s.rdb.AddEntry(ctx, s.keys.Input(warm), doc)
	}
	if err != nil {
		return fail(redisError(err, "adopt %s", warm))
	}
	s.lifecycle(ctx, id, protocol.EventCreated, map[string]any{"container_id": cid, "incarnation": n, "pool": p.Name, "warm_worker_id": warm})
	s.log.Info("hibernated worker woken in a warm pool worker", "worker_id", id, "incarnation", n, "pool", p.Name, "warm_worker_id", warm)
	s.adoptions.Add(1)
	go func() {
		defer s.adoptions.Done()
		s.forgetAdopted(id, warm)
	}()
	return true, nil
}

// readyWarm takes a warm worker of pool that is this host's, not
// degraded, whose container is there: its id and container id ("" when
// none). Another host's is put back.
func (s *Spawner) readyWarm(ctx context.Context, pool string) (id, cid string) {
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
		if rt, err := s.fleet.route(ctx, w); err != nil || !rt.here {
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
func (s *Spawner) forgetAdopted(id, warm string) {
	ctx, cancel := context.WithTimeout(context.Background(), adoptedForgetAfter+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(adoptedForgetAfter)
	for time.Now().Before(deadline) {
		if beats, err := s.rdb.HasHeartbeat(ctx, id); err == nil && beats {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.forgetWarm(ctx, warm)
}

// forgetWarm removes a warm worker's keys and Redis user, and its
// gateway directory when it still has one (its identity ended without a
// retirement: a woken worker took its container).
func (s *Spawner) forgetWarm(ctx context.Context, warm string) {
	if err := s.users.drop(ctx, warm); err != nil {
		s.log.Warn("the Redis user of an adopted warm worker was not deleted (the reconciler will)", "warm_worker_id", warm, "err", err)
	}
	s.closeSealed(ctx, warm)
	s.rdb.ForgetWorkerKeys(ctx, warm)
}
