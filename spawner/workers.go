package spawner

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"

	"github.com/agentvisor/agentvisor/protocol"
)

// Delete stops a worker (its wrapper gets SIGTERM and the stop timeout)
// and removes its container.
func (s *Spawner) Delete(ctx context.Context, id string) error {
	c, err := s.find(ctx, id)
	if err != nil {
		return err
	}
	if c.State != nil && c.State.Paused {
		// A paused process cannot take SIGTERM: wake it first.
		_ = s.docker.ContainerUnpause(ctx, c.ID)
	}
	timeout := int(s.cfg.StopTimeout.Seconds())
	// Stopping may take the whole stop timeout: a context of its own.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StopTimeout+15*time.Second)
	defer cancel()
	if err := s.docker.ContainerStop(sctx, c.ID, container.StopOptions{Timeout: &timeout}); err != nil && !errdefs.IsNotFound(err) {
		return &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf("stop worker %s: %w", id, err)}
	}
	if err := s.docker.ContainerRemove(sctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !errdefs.IsNotFound(err) && !s.goneSoon(sctx, c.ID) {
		return &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf("remove worker %s: %w", id, err)}
	}
	s.rdb.SRem(sctx, s.keys.Workers(), id)
	s.writeStatus(sctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerStopped),
		protocol.StatusFieldState: string(protocol.WorkerStopped)})
	s.lifecycle(sctx, id, protocol.EventRemoved, nil)
	s.log.Info("worker deleted", "worker_id", id)
	return nil
}

// goneSoon waits (up to 10 s) for a container that someone else is
// removing, such as the events loop after the container died ("removal
// already in progress"), and says whether it went.
func (s *Spawner) goneSoon(ctx context.Context, containerID string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := s.docker.ContainerInspect(ctx, containerID); errdefs.IsNotFound(err) {
			return true
		}
	}
	return false
}

// Pause freezes a worker's container (CPU 0, memory kept).
func (s *Spawner) Pause(ctx context.Context, id string) error {
	c, err := s.find(ctx, id)
	if err != nil {
		return err
	}
	if c.State != nil && c.State.Paused {
		return nil
	}
	if c.State == nil || !c.State.Running {
		return &Error{protocol.CodeNotFound, fmt.Errorf("worker %s is not running", id)}
	}
	if err := s.docker.ContainerPause(ctx, c.ID); err != nil {
		// Another pauser (the wrapper's own request, the idle monitor)
		// may have won the race: the worker is paused all the same.
		if st := s.stateNow(ctx, id); st != nil && st.Paused {
			return nil
		}
		return &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf("pause worker %s: %w", id, err)}
	}
	s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerPaused),
		protocol.StatusFieldState: string(protocol.WorkerPaused)})
	s.lifecycle(ctx, id, protocol.EventPaused, nil)
	return nil
}

// stateNow inspects a worker again, after the engine refused a pause or
// an unpause that another caller may have done first (nil: unknown).
func (s *Spawner) stateNow(ctx context.Context, id string) *container.State {
	c, err := s.find(ctx, id)
	if err != nil {
		return nil
	}
	return c.State
}

// Unpause wakes a paused worker.
func (s *Spawner) Unpause(ctx context.Context, id string) error {
	c, err := s.find(ctx, id)
	if err != nil {
		return err
	}
	if c.State == nil || !c.State.Paused {
		return nil
	}
	if err := s.docker.ContainerUnpause(ctx, c.ID); err != nil {
		// The input monitor may have woken it first.
		if st := s.stateNow(ctx, id); st != nil && !st.Paused {
			return nil
		}
		return &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf("unpause worker %s: %w", id, err)}
	}
	s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning),
		protocol.StatusFieldState: string(protocol.WorkerIdle)})
	s.lifecycle(ctx, id, protocol.EventUnpaused, nil)
	return nil
}

// Status returns what the engine and the status hash say of a worker.
func (s *Spawner) Status(ctx context.Context, id string) (protocol.WorkerInfo, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Status(id)).Result()
	if err != nil {
		return protocol.WorkerInfo{}, &Error{protocol.CodeUpstreamUnavailable, err}
	}
	info := InfoFromHash(id, h)
	c, err := s.find(ctx, id)
	if err != nil {
		if len(h) == 0 {
			return protocol.WorkerInfo{}, err
		}
		if info.Status != protocol.ContainerQueued && info.Status != protocol.ContainerFailed {
			info.Status = protocol.ContainerStopped
		}
		return info, nil
	}
	info.ContainerID = c.ID
	info.Image = c.Config.Image
	switch {
	case c.State.Paused:
		info.Status = protocol.ContainerPaused
	case c.State.Running:
		info.Status = protocol.ContainerRunning
	case c.State.Status == "created":
		info.Status = protocol.ContainerStarting
	case c.State.OOMKilled || c.State.ExitCode != 0:
		info.Status = protocol.ContainerFailed
		code := c.State.ExitCode
		info.ExitCode = &code
	default:
		info.Status = protocol.ContainerStopped
	}
	if c.NetworkSettings != nil && c.NetworkSettings.IPAddress != "" {
		info.IP = c.NetworkSettings.IPAddress
	}
	return info, nil
}

// InfoFromHash reads a worker's status hash (Keys.Status) as the manager
// wrote it, without asking the engine: what a client without Docker sees.
func InfoFromHash(id string, h map[string]string) protocol.WorkerInfo {
	info := protocol.WorkerInfo{WorkerID: id, Status: protocol.ContainerStatus(h[protocol.StatusFieldContainer]),
		State: protocol.WorkerState(h[protocol.StatusFieldState]), Health: protocol.Health(h[protocol.StatusFieldHealth]),
		AgentType: protocol.AgentType(h[protocol.StatusFieldAgentType]), Kind: protocol.Kind(h[protocol.StatusFieldKind]),
		ProjectID: h[protocol.StatusFieldProjectID], ContainerID: h[protocol.StatusFieldContainerID], Image: h[protocol.StatusFieldImage],
		RequestID: h[protocol.StatusFieldRequestID], TaskID: h[protocol.StatusFieldTaskID], Error: h[protocol.StatusFieldError]}
	if v := h[protocol.StatusFieldExitCode]; v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			info.ExitCode = &n
		}
	}
	info.StartedAt, _ = protocol.ParseTime(h[protocol.StatusFieldStartedAt])
	info.UpdatedAt, _ = protocol.ParseTime(h[protocol.StatusFieldUpdatedAt])
	if !info.State.Valid() {
		info.State = ""
	}
	if info.Health != protocol.HealthHealthy && info.Health != protocol.HealthDegraded {
		info.Health = ""
	}
	return info
}

// List returns every worker of this key prefix that has a container.
func (s *Spawner) List(ctx context.Context) ([]protocol.WorkerInfo, error) {
	cs, err := s.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: s.managedFilter()})
	if err != nil {
		return nil, &Error{protocol.CodeUpstreamUnavailable, err}
	}
	out := make([]protocol.WorkerInfo, 0, len(cs))
	for _, c := range cs {
		id := c.Labels[protocol.LabelWorkerID]
		if id == "" {
			continue
		}
		info, err := s.Status(ctx, id)
		if err != nil {
			continue
		}
		out = append(out, info)
	}
	return out, nil
}
