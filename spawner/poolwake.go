package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
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
// spec was ready here (the caller makes a container). done true: woken,
// or found woken or deleted by another meanwhile.
func (s *Spawner) wakeIntoWarm(ctx context.Context, id string, spec protocol.WorkerSpec, n int) (bool, error) {
	p := s.poolFor(spec)
	if p == nil {
		return false, nil
	}
	host := s.Host()
	warm, cid := s.readyWarm(ctx, p.Name)
	if warm == "" {
		return false, nil
	}
	putBack := func() { _ = s.rdb.AddWarm(context.WithoutCancel(ctx), p.Name, warm) }
	user := ""
	if s.users.aclMode(ctx) {
		if err := s.rdb.CopyWorkerUser(ctx, warm, id, spec.Kind); err != nil {
			putBack()
			return false, redisError(err, "the Redis user of %s", id)
		}
		user = s.rdb.WorkerUser(id)
	}
	switch got, err := s.rdb.WakeIntoWarm(ctx, host, id, warm, p.Name); {
	case err != nil:
		putBack()
		return false, redisError(err, "wake %s into %s", id, warm)
	case got == 0:
		putBack() // woken or deleted meanwhile
		return true, nil
	case got < 0:
		return false, nil // the warm worker was retired meanwhile: a container is made
	}
	// From here the container is the woken worker's: a failure leaves it
	// a member of Workers whose container is gone or unready, which the
	// health check and the reconciler answer as for any incarnation.
	start := s.now()
	fail := func(err error) (bool, error) {
		s.log.Warn("a wake into a warm pool worker failed: its container is removed", "worker_id", id, "warm_worker_id", warm, "err", err)
		_ = s.removeContainer(context.WithoutCancel(ctx), id, false)
		return true, err
	}
	if s.sealed() && s.gateway != nil {
		s.closeSealed(ctx, id) // a directory of an earlier incarnation left open
		if _, err := s.gateway.Rename(ctx, warm, id); err != nil {
			return fail(errorf(protocol.CodeUpstreamUnavailable, "the gateway did not rename %s's sockets: %v", warm, err))
		}
	}
	if err := s.docker.ContainerRename(ctx, cid, ContainerName(id)); err != nil {
		return fail(engineError(err, "rename the container of %s", warm))
	}
	s.writeStatus(ctx, id, map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerStarting), protocol.StatusFieldContainer: string(protocol.ContainerRunning),
		protocol.StatusFieldHealth: string(protocol.HealthHealthy), protocol.StatusFieldIncarnation: n,
		protocol.StatusFieldIncarnatedAt: protocol.FormatTime(start), protocol.StatusFieldReplacements: 0,
		protocol.StatusFieldContainerID: cid, protocol.StatusFieldHost: host, protocol.StatusFieldError: ""})
	if err := s.docker.ContainerUnpause(ctx, cid); err != nil {
		if c, ierr := s.docker.ContainerInspect(ctx, cid); ierr != nil || c.State == nil || !c.State.Running || c.State.Paused {
			return fail(engineError(err, "unpause the container of %s", warm))
		} // running already (never paused, or unpaused by another)
	}
	doc, err := protocol.Adopt{WorkerID: id, RedisUser: user}.Encode()
	if err == nil {
		err = s.rdb.AddEntry(ctx, s.keys.Input(warm), doc)
	}
	if err != nil {
		return fail(redisError(err, "adopt %s", warm))
	}
	s.lifecycle(ctx, id, protocol.EventCreated, map[string]any{"container_id": cid, "incarnation": n, "pool": p.Name, "warm_worker_id": warm})
	s.log.Info("hibernated worker woken in a warm pool worker", "worker_id", id, "incarnation", n, "pool", p.Name, "warm_worker_id", warm)
	go s.forgetAdopted(id, warm)
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
		c, err := s.docker.ContainerInspect(ctx, ContainerName(w))
		if err != nil || c.State == nil || !(c.State.Running || c.State.Paused) {
			continue // gone: its retirement is the crash watcher's
		}
		return w, c.ID
	}
}

// forgetAdopted removes what is left of a warm worker whose container a
// woken worker took, once that worker beats (its wrapper re-executed as
// it): the warm worker's status, heartbeat, streams and Redis user.
func (s *Spawner) forgetAdopted(id, warm string) {
	ctx, cancel := context.WithTimeout(context.Background(), adoptedForgetAfter+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(adoptedForgetAfter)
	for time.Now().Before(deadline) {
		if n, err := s.rdb.C.Exists(ctx, s.keys.Heartbeat(id)).Result(); err == nil && n == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.users.drop(ctx, warm); err != nil {
		s.log.Warn("the Redis user of an adopted warm worker was not deleted (the reconciler will)", "warm_worker_id", warm, "err", err)
	}
	s.rdb.C.Del(ctx, s.keys.Status(warm), s.keys.StatusHistory(warm), s.keys.Heartbeat(warm), s.keys.Input(warm), s.keys.Output(warm))
}
