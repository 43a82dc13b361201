package spawner

import (
	"bytes"
	"context"

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

// checkLimits refuses (INVALID_COMMAND) a spec that asks for more cores
// than the engine has. The memory floor is the protocol's own check.
func (s *Spawner) checkLimits(ctx context.Context, spec protocol.WorkerSpec) error {
	if spec.Limits.CPUs == 0 {
		return nil
	}
	s.cpuOnce.Do(func() {
		if info, err := s.engine.Info(ctx); err == nil {
			s.engineCPUs = info.CPUs
		}
	})
	if s.engineCPUs > 0 && spec.Limits.CPUs > float64(s.engineCPUs) {
		return errorf(protocol.CodeInvalidCommand, "spec.limits.cpus: %g, but the engine has %d cores", spec.Limits.CPUs, s.engineCPUs)
	}
	return nil
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
