package spawner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// Project volumes hold the agent's home (its sessions) and the workspace
// of a project, so that a replacement container resumes. A volume belongs
// to one key prefix, agent and project: its name carries a readable part
// and a hash of all three (no two projects share one, whatever their
// spelling), and its labels say whose it is. A volume no container used
// for VOLUME_RETENTION is removed by the leader.

var volumeSafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// ProjectVolume is the name of the volume of a project's agent under a
// key prefix.
func ProjectVolume(prefix string, agent protocol.AgentType, project string) string {
	readable := volumeSafe.ReplaceAllString(project, "_")
	if len(readable) > 40 {
		readable = readable[:40]
	}
	sum := sha256.Sum256([]byte(prefix + "\x00" + string(agent) + "\x00" + project))
	return "agentvisor-" + string(agent) + "-" + readable + "-" + hex.EncodeToString(sum[:5])
}

// projectMounts gives the worker its project's volume as the agent's
// home. The engine makes the volume, with its owner's labels, when the
// container is created and it does not exist yet: a create asks the
// engine nothing more for it.
func projectMounts(prefix string, spec protocol.WorkerSpec) []engine.Mount {
	return []engine.Mount{{Volume: ProjectVolume(prefix, spec.AgentType, spec.ProjectID), Target: "/home/worker",
		Labels: map[string]string{
			protocol.LabelManaged: "true", protocol.LabelKeyPrefix: prefix,
			ctlplane.LabelAgentType: string(spec.AgentType), ctlplane.LabelProjectID: spec.ProjectID,
		}}}
}

// projectVolumes are the project volumes of this key prefix on this
// host's engine: their use recorded, listed, removed and collected.
type projectVolumes struct {
	*env
	engine    engine.Engine
	enabled   bool          // PROJECT_VOLUMES
	retention time.Duration // VOLUME_RETENTION: an unused volume is removed after it
}

// touch records the use of a project's volume (the volume GC removes one
// unused for its retention); projectMounts makes it.
func (s *projectVolumes) touch(ctx context.Context, spec protocol.WorkerSpec) error {
	if !s.enabled || spec.ProjectID == "" {
		return nil
	}
	name := ProjectVolume(s.keys.Prefix, spec.AgentType, spec.ProjectID)
	if err := s.rdb.TouchVolume(ctx, name, s.now()); err != nil {
		return redisError(err, "record the use of volume %s", name)
	}
	return nil
}

// Volume is a project volume of this key prefix.
type Volume struct {
	Name      string             `json:"name"`
	AgentType protocol.AgentType `json:"agent_type"`
	ProjectID string             `json:"project_id"`
	LastUsed  time.Time          `json:"last_used"`
}

// Volumes lists the project volumes of this key prefix.
func (s *Spawner) Volumes(ctx context.Context) ([]Volume, error) { return s.volumes.list(ctx) }

// RemoveVolume removes a project volume of this key prefix that no
// container uses (CONFLICT when one does).
func (s *Spawner) RemoveVolume(ctx context.Context, name string) error {
	return s.volumes.remove(ctx, name)
}

// RemoveVolumes removes every project volume of this key prefix on this
// host's engine that no container uses, and returns their names; a
// volume in use is left (its name in the error).
func (s *Spawner) RemoveVolumes(ctx context.Context) ([]string, error) {
	vs, err := s.volumes.list(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, v := range vs {
		if err := s.volumes.remove(ctx, v.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, v.Name)
	}
	return removed, errors.Join(errs...)
}

func (s *projectVolumes) list(ctx context.Context) ([]Volume, error) {
	vs, err := s.engine.Volumes(ctx)
	if err != nil {
		return nil, engineError(err, "list volumes")
	}
	out := make([]Volume, 0, len(vs))
	for _, v := range vs {
		last, err := s.rdb.VolumeLastUsed(ctx, v.Name)
		if err != nil {
			return nil, redisError(err, "last use of volume %s", v.Name)
		}
		out = append(out, Volume{Name: v.Name, AgentType: protocol.AgentType(v.Labels[ctlplane.LabelAgentType]),
			ProjectID: v.Labels[ctlplane.LabelProjectID], LastUsed: last})
	}
	return out, nil
}

func (s *projectVolumes) remove(ctx context.Context, name string) error {
	if err := s.engine.RemoveVolume(ctx, name, false); err != nil {
		return engineError(err, "remove volume %s", name)
	}
	return s.rdb.ForgetVolume(ctx, name)
}

// VolumeGC removes, every hour, the project volumes of this key prefix
// that no container used for VOLUME_RETENTION (a volume in use is never
// removed). It runs on the leader.
type VolumeGC struct {
	job
	volumes *projectVolumes
}

// Start collects until Stop.
func (g *VolumeGC) Start(ctx context.Context) { g.start(ctx, g.run) }

func (g *VolumeGC) run(ctx context.Context) {
	every(ctx, time.Hour, func(ctx context.Context) { g.volumes.collect(ctx) })
}

// collect removes the stale volumes and returns their names.
func (s *projectVolumes) collect(ctx context.Context) []string {
	vs, err := s.list(ctx)
	if err != nil {
		s.log.Warn("volume gc", "err", err)
		return nil
	}
	var removed []string
	for _, v := range vs {
		if v.LastUsed.IsZero() || s.now().Sub(v.LastUsed) < s.retention {
			continue
		}
		if err := s.remove(ctx, v.Name); err != nil {
			s.log.Info("volume gc: kept", "volume", v.Name, "why", err)
			continue
		}
		removed = append(removed, v.Name)
	}
	if len(removed) > 0 {
		s.log.Info("volume gc: removed", "volumes", removed)
	}
	return removed
}
