package spawner

import (
	"context"
	"fmt"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// noContainer is the NOT_FOUND error of a worker without a container.
func noContainer(id string) *Error {
	return &Error{Code: protocol.CodeNotFound, Err: fmt.Errorf("worker %s has no container", id)}
}

// Delete retires a worker: it leaves the workers set first (nothing
// judges or replaces it from then on), its wrapper gets SIGTERM and the
// stop timeout to finish its task, its container is removed, and every
// task it held or had not read yet is answered.
func (s *Spawner) Delete(ctx context.Context, id string) error {
	member, err := s.rdb.IsWorker(ctx, id)
	if err != nil {
		return redisError(err, "workers set")
	}
	if !member {
		if h, err := s.rdb.Status(ctx, id); err == nil && s.hib.isHibernated(ctx, id, h) {
			if ended, err := s.hib.endHibernated(ctx, id, h); ended || err != nil {
				return err
			}
			if member, _ := s.rdb.IsWorker(ctx, id); member {
				return s.Delete(ctx, id) // a wake won: retired as it runs
			}
		}
		if _, err := s.inst.find(ctx, id); err != nil {
			return err
		}
		// A container the workers set does not know: an orphan, or a
		// worker another caller is retiring. Remove it all the same.
		return s.inst.removeContainer(ctx, id, false)
	}
	_, err = s.retire(ctx, id, retirement{reason: protocol.RemovedDeleted, graceful: true, code: protocol.CodeTerminated,
		msg: "the worker was deleted before it ran this task"})
	return err
}

// Status returns what the engine and the status hash say of a worker.
func (s *Spawner) Status(ctx context.Context, id string) (protocol.WorkerInfo, error) {
	h, err := s.rdb.Status(ctx, id)
	if err != nil {
		return protocol.WorkerInfo{}, redisError(err, "status of %s", id)
	}
	info := InfoFromHash(id, h)
	if !s.fleet.Mine(info.Host) {
		if len(h) == 0 {
			return protocol.WorkerInfo{}, errorf(protocol.CodeNotFound, "no worker %s", id)
		}
		return info, nil // another host's: as Redis knows it
	}
	c, err := s.inst.find(ctx, id)
	if err != nil {
		if len(h) == 0 {
			return protocol.WorkerInfo{}, err
		}
		if info.Status != protocol.ContainerQueued && info.Status != protocol.ContainerFailed && info.Status != protocol.ContainerHibernated {
			info.Status = protocol.ContainerStopped
		}
		return info, nil
	}
	info.ContainerID = c.ID
	info.Image = c.Image
	switch {
	case c.State == engine.Suspended:
		info.Status = protocol.ContainerPaused
	case c.State == engine.Running:
		info.Status = protocol.ContainerRunning
	case c.State == engine.Created:
		info.Status = protocol.ContainerStarting
	case c.OOMKilled || c.ExitCode != 0:
		info.Status = protocol.ContainerFailed
		code := c.ExitCode
		info.ExitCode = &code
	default:
		info.Status = protocol.ContainerStopped
	}
	if c.IP != "" {
		info.IP = c.IP
	}
	return info, nil
}

// InfoFromHash is protocol.WorkerInfoFromStatus: a worker's status hash
// read without asking the engine.
func InfoFromHash(id string, h map[string]string) protocol.WorkerInfo {
	return protocol.WorkerInfoFromStatus(id, h)
}

// List returns every worker of this key prefix: those with a container
// on this host's engine (as the engine says), this host's hibernated
// workers and the members of other hosts (as Redis says).
func (s *Spawner) List(ctx context.Context) ([]protocol.WorkerInfo, error) {
	cs, err := s.engine.List(ctx, engine.Filter{})
	if err != nil {
		return nil, engineError(err, "list containers")
	}
	placed, err := s.rdb.Placements(ctx)
	if err != nil {
		return nil, redisError(err, "placements")
	}
	out := make([]protocol.WorkerInfo, 0, len(cs))
	seen := map[string]bool{}
	for _, c := range cs {
		id := c.Worker
		if id == "" {
			continue
		}
		seen[id] = true
		info, err := s.Status(ctx, id)
		if err != nil {
			continue
		}
		out = append(out, info)
	}
	hibernated, err := s.rdb.HibernatedOn(ctx, s.Host())
	if err != nil {
		return nil, redisError(err, "hibernated workers")
	}
	for _, id := range hibernated {
		if seen[id] {
			continue
		}
		seen[id] = true
		if info, err := s.Status(ctx, id); err == nil {
			out = append(out, info)
		}
	}
	for id, host := range placed {
		if seen[id] || s.fleet.Mine(host) {
			continue
		}
		if info, err := s.Status(ctx, id); err == nil {
			out = append(out, info)
		}
	}
	return out, nil
}
