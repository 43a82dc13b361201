package spawner

import (
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/errdefs"
	"github.com/docker/go-units"

	"github.com/agentvisor/agentvisor/protocol"
)

// The resources of a worker: the spec's limits over the configuration's.

func (s *Spawner) memory(spec protocol.WorkerSpec) int64 {
	if spec.Limits.Memory != "" {
		if n, err := units.RAMInBytes(spec.Limits.Memory); err == nil {
			return n
		}
	}
	return s.cfg.MemoryLimit
}

func (s *Spawner) cpus(spec protocol.WorkerSpec) float64 {
	if spec.Limits.CPUs > 0 {
		return spec.Limits.CPUs
	}
	return s.cfg.CPULimit
}

func (s *Spawner) pids(spec protocol.WorkerSpec) int64 {
	if spec.Limits.Pids > 0 {
		return spec.Limits.Pids
	}
	return s.cfg.PidsLimit
}

// projectMounts gives the worker its project's volume as the agent's home.
func projectMounts(spec protocol.WorkerSpec) []mount.Mount {
	return []mount.Mount{{Type: mount.TypeVolume, Source: ProjectVolume(spec.AgentType, spec.ProjectID), Target: "/home/worker"}}
}

func isConflict(err error) bool { return errdefs.IsConflict(err) }
