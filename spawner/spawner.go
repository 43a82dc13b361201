package spawner

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"github.com/docker/go-units"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// ContainerClient is the part of the Docker client the spawner uses for
// containers.
type ContainerClient interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *network.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, containerID string, options container.StartOptions) error
	ContainerStop(ctx context.Context, containerID string, options container.StopOptions) error
	ContainerRemove(ctx context.Context, containerID string, options container.RemoveOptions) error
	ContainerPause(ctx context.Context, containerID string) error
	ContainerUnpause(ctx context.Context, containerID string) error
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
}

var _ ContainerClient = (*client.Client)(nil)

// Spawner creates, pauses, unpauses and removes worker containers. Its
// knowledge is in Docker labels and Redis, so a restarted spawner knows its
// workers.
type Spawner struct {
	cfg    Config
	docker ContainerClient
	rdb    *redis.Client
	images *Images
	log    *slog.Logger
	now    func() time.Time
	keys   protocol.Keys

	health map[string]*healthState // owned by the monitor goroutine
}

// New returns a Spawner. images builds the worker images (its Docker and
// Redis may be the same clients); without a base image of its own it takes
// the configuration's (WORKER_BASE_IMAGE).
func New(cfg Config, docker ContainerClient, rdb *redis.Client, images *Images, log *slog.Logger) *Spawner {
	if log == nil {
		log = slog.Default()
	}
	if images != nil && images.BaseImage == "" {
		images.BaseImage = cfg.BaseImage
	}
	return &Spawner{cfg: cfg, docker: docker, rdb: rdb, images: images, log: log, now: time.Now, keys: cfg.Keys}
}

// Error is a spawner failure with a stable code.
type Error struct {
	Code protocol.Code
	Err  error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ProtocolError returns the error object of a Reply.
func ProtocolError(err error) *protocol.Error {
	var se *Error
	if errors.As(err, &se) {
		return protocol.NewError(se.Code, "%v", se.Err)
	}
	var de *protocol.DecodeError
	if errors.As(err, &de) {
		return protocol.NewError(protocol.CodeInvalidCommand, "%v", err)
	}
	return protocol.NewError(protocol.CodeInternalError, "%v", err)
}

// IsResourceExhausted reports whether err is a create that found no slot.
func IsResourceExhausted(err error) bool {
	var se *Error
	return errors.As(err, &se) && se.Code == protocol.CodeResourceExhausted
}

// IsNotFound reports whether err names a worker that does not exist.
func IsNotFound(err error) bool {
	var se *Error
	return errors.As(err, &se) && se.Code == protocol.CodeNotFound
}

func newWorkerID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ContainerName is the name of a worker's container.
func ContainerName(workerID string) string { return "agentvisor-" + workerID }

var volumeSafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// ProjectVolume is the volume that holds the agent's home (its sessions)
// and the workspace of a project, so that a replacement container resumes.
func ProjectVolume(agent protocol.AgentType, project string) string {
	return "agentvisor-" + string(agent) + "-" + volumeSafe.ReplaceAllString(project, "_")
}

// managedFilter selects the containers of this spawner's key prefix.
func (s *Spawner) managedFilter() filters.Args {
	return filters.NewArgs(filters.Arg("label", protocol.LabelManaged+"=true"),
		filters.Arg("label", protocol.LabelKeyPrefix+"="+s.keys.Prefix))
}

// creatingKey holds the ids of creates that hold a slot but have no
// container yet.
func (s *Spawner) creatingKey() string { return s.keys.CreationQueue() + ":creating" }

// count returns how many workers hold a slot: containers that run, are
// paused or starting, and creates that reserved a slot and have no
// container yet.
func (s *Spawner) count(ctx context.Context) (int, error) {
	cs, err := s.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: s.managedFilter()})
	if err != nil {
		return 0, err
	}
	ids := map[string]bool{}
	for _, c := range cs {
		if c.State == "running" || c.State == "paused" || c.State == "created" || c.State == "restarting" {
			ids[c.Labels[protocol.LabelWorkerID]] = true
		}
	}
	creating, err := s.rdb.SMembers(ctx, s.creatingKey()).Result()
	if err != nil {
		return 0, err
	}
	for _, id := range creating {
		ids[id] = true
	}
	return len(ids), nil
}

// evictOldestPaused removes the worker paused longest (at least
// EvictPausedAfter, with no input waiting) to free a slot for the create
// of forID, and says whether it did.
func (s *Spawner) evictOldestPaused(ctx context.Context, forID string) bool {
	f := s.managedFilter()
	f.Add("status", "paused")
	cs, err := s.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return false
	}
	now := s.now()
	victim, since := "", time.Time{}
	for _, c := range cs {
		id := c.Labels[protocol.LabelWorkerID]
		at, err := protocol.ParseTime(s.rdb.HGet(ctx, s.keys.Status(id), protocol.StatusFieldUpdatedAt).Val())
		if id == "" || err != nil || now.Sub(at) < s.cfg.EvictPausedAfter || s.hasInput(ctx, id) {
			continue
		}
		if victim == "" || at.Before(since) {
			victim, since = id, at
		}
	}
	if victim == "" {
		return false
	}
	s.log.Info("at the worker limit: evicting the worker paused longest", "worker_id", victim, "paused_for", now.Sub(since).String(), "for", forID)
	s.lifecycle(ctx, victim, protocol.EventStopping, map[string]any{"reason": "evicted", "paused_for_ms": now.Sub(since).Milliseconds(), "for_worker": forID})
	if err := s.Delete(ctx, victim); err != nil && !IsNotFound(err) {
		s.log.Warn("evict a paused worker", "worker_id", victim, "err", err)
		return false
	}
	return true
}

// acquireSlot waits until fewer than MaxWorkers workers exist and this
// create is at the head of the creation queue (a Redis FIFO), or until
// CreationTimeout passes: then RESOURCE_EXHAUSTED.
func (s *Spawner) acquireSlot(ctx context.Context, workerID string) error {
	q := s.keys.CreationQueue()
	if err := s.rdb.RPush(ctx, q, workerID).Err(); err != nil {
		return &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf("creation queue: %w", err)}
	}
	defer s.rdb.LRem(context.WithoutCancel(ctx), q, 1, workerID)
	deadline := time.Now().Add(s.cfg.CreationTimeout)
	queued := false
	for {
		head, err := s.rdb.LIndex(ctx, q, 0).Result()
		if err == nil && head == workerID {
			n, err := s.count(ctx)
			if err == nil && n < s.cfg.MaxWorkers {
				// Reserve the slot before leaving the queue, so that the
				// next create counts it.
				s.rdb.SAdd(ctx, s.creatingKey(), workerID)
				return nil
			}
			if err == nil && s.cfg.EvictPaused && s.evictOldestPaused(ctx, workerID) {
				continue // count again at once
			}
		} else if err == redis.Nil {
			// The queue was cleared under us: join it again.
			s.rdb.RPush(ctx, q, workerID)
		}
		if !queued {
			queued = true
			s.writeStatus(ctx, workerID, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerQueued),
				protocol.StatusFieldState: string(protocol.WorkerStarting)})
			s.lifecycle(ctx, workerID, protocol.EventQueued, map[string]any{"max_workers": s.cfg.MaxWorkers})
		}
		if time.Now().After(deadline) {
			return &Error{protocol.CodeResourceExhausted, fmt.Errorf("no worker slot freed within %s (MAX_CONCURRENT_WORKERS=%d)", s.cfg.CreationTimeout, s.cfg.MaxWorkers)}
		}
		select {
		case <-ctx.Done():
			return &Error{protocol.CodeResourceExhausted, ctx.Err()}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Create makes a worker: it waits for a slot, ensures the image of the
// spec's agent and capabilities, and starts its container. It returns the
// worker's info; its id is a new UUID.
func (s *Spawner) Create(ctx context.Context, spec protocol.WorkerSpec) (protocol.WorkerInfo, error) {
	return s.CreateFor(ctx, "", spec)
}

// LabelCommandID marks the container a create command made, so that the
// same command delivered again (its manager died before acknowledging it)
// finds the container instead of making a second one.
const LabelCommandID = protocol.LabelPrefix + "command_id"

// CreateFor is Create on behalf of a command: a container that the same
// command already made is returned instead of a new one.
func (s *Spawner) CreateFor(ctx context.Context, commandID string, spec protocol.WorkerSpec) (protocol.WorkerInfo, error) {
	if commandID != "" {
		f := s.managedFilter()
		f.Add("label", LabelCommandID+"="+commandID)
		if cs, err := s.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: f}); err == nil && len(cs) > 0 {
			return s.Status(ctx, cs[0].Labels[protocol.LabelWorkerID])
		}
	}
	if err := spec.Validate(); err != nil {
		return protocol.WorkerInfo{}, &Error{protocol.CodeInvalidCommand, err}
	}
	if spec.Kind == "" {
		spec.Kind = protocol.KindLongLived
	}
	id := newWorkerID()
	defer s.rdb.SRem(context.WithoutCancel(ctx), s.creatingKey(), id) // once the container exists, it counts itself
	if err := s.acquireSlot(ctx, id); err != nil {
		s.writeStatus(context.WithoutCancel(ctx), id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerFailed),
			protocol.StatusFieldState: string(protocol.WorkerFailed), protocol.StatusFieldError: err.Error()})
		return protocol.WorkerInfo{}, err
	}
	img, err := s.images.EnsureImage(ctx, spec.AgentType, spec.Capabilities)
	if err != nil {
		return protocol.WorkerInfo{}, &Error{protocol.CodeInternalError, err}
	}
	now := s.now()
	name := ContainerName(id)
	caps, _ := protocol.NormalizeCapabilities(spec.Capabilities)
	capNames := make([]string, len(caps))
	for i, c := range caps {
		capNames[i] = string(c)
	}
	labels := map[string]string{
		protocol.LabelManaged: "true", protocol.LabelWorkerID: id, protocol.LabelAgentType: string(spec.AgentType),
		protocol.LabelKind: string(spec.Kind), protocol.LabelProjectID: spec.ProjectID,
		protocol.LabelCreatedAt: protocol.FormatTime(now), protocol.LabelKeyPrefix: s.keys.Prefix,
		protocol.LabelCapabilities: strings.Join(capNames, ","),
	}
	if commandID != "" {
		labels[LabelCommandID] = commandID
	}
	env := s.workerEnv(id, spec)
	stop := int(s.cfg.StopTimeout.Seconds())
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(s.cfg.NetworkMode),
		Resources:   container.Resources{Memory: s.memory(spec), NanoCPUs: int64(s.cpus(spec) * 1e9), PidsLimit: ptr(s.pids(spec))},
		SecurityOpt: []string{"no-new-privileges"},
		CapDrop:     []string{"ALL"},
		Init:        ptr(false), // the wrapper is PID 1
	}
	if s.cfg.ProjectVolumes && spec.ProjectID != "" {
		hc.Mounts = []mount.Mount{{Type: mount.TypeVolume, Source: ProjectVolume(spec.AgentType, spec.ProjectID), Target: "/home/worker"}}
		env = append(env, "WORKSPACE=/home/worker/workspace")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.prepareStreams(cctx, id, spec); err != nil {
		return protocol.WorkerInfo{}, &Error{protocol.CodeUpstreamUnavailable, err}
	}
	s.writeStatus(cctx, id, map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerStarting), protocol.StatusFieldContainer: string(protocol.ContainerStarting),
		protocol.StatusFieldAgentType: string(spec.AgentType), protocol.StatusFieldKind: string(spec.Kind),
		protocol.StatusFieldProjectID: spec.ProjectID, protocol.StatusFieldImage: img.Tag,
		protocol.StatusFieldCreatedAt: protocol.FormatTime(now), protocol.StatusFieldHealth: string(protocol.HealthHealthy),
		protocol.StatusFieldSpec: specJSON(spec)})
	resp, err := s.docker.ContainerCreate(cctx, &container.Config{Image: img.Tag, Env: env, Labels: labels, User: "1000:1000",
		StopTimeout: &stop}, hc, nil, nil, name)
	if err != nil {
		return protocol.WorkerInfo{}, &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf("create container: %w", err)}
	}
	s.rdb.SAdd(cctx, s.keys.Workers(), id)
	if err := s.docker.ContainerStart(cctx, resp.ID, container.StartOptions{}); err != nil {
		_ = s.docker.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
		s.rdb.SRem(context.WithoutCancel(ctx), s.keys.Workers(), id)
		return protocol.WorkerInfo{}, &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf("start container: %w", err)}
	}
	s.writeStatus(cctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning),
		protocol.StatusFieldContainerID: resp.ID})
	s.lifecycle(cctx, id, protocol.EventCreated, map[string]any{"container_id": resp.ID, "image": img.Tag})
	s.log.Info("worker created", "worker_id", id, "agent_type", spec.AgentType, "kind", spec.Kind, "image", img.Tag)
	return s.Status(ctx, id)
}

// specJSON is the spec as the status hash keeps it (secrets come from the
// host's environment, never from a spec, so none is stored).
func specJSON(spec protocol.WorkerSpec) string {
	b, _ := json.Marshal(spec)
	return string(b)
}

// prepareStreams creates the consumer group of a long-lived worker's input
// before the worker starts, so that tasks sent right after create are
// served.
func (s *Spawner) prepareStreams(ctx context.Context, id string, spec protocol.WorkerSpec) error {
	stream := s.keys.InputFor(spec.Kind, id)
	err := s.rdb.XGroupCreateMkStream(ctx, stream, protocol.GroupFor(spec.Kind), "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create group on %s: %w", stream, err)
	}
	return nil
}

func (s *Spawner) workerEnv(id string, spec protocol.WorkerSpec) []string {
	env := []string{
		"WORKER_ID=" + id, "REDIS_URL=" + s.cfg.RedisURLForWorkers, "WORKER_KEY_PREFIX=" + s.keys.Prefix,
		"AGENT_TYPE=" + string(spec.AgentType), "WORKER_KIND=" + string(spec.Kind),
		"SHUTDOWN_GRACE=" + (s.cfg.StopTimeout - 10*time.Second).String(),
		"HEARTBEAT_INTERVAL=" + s.cfg.HeartbeatInterval.String(),
	}
	if len(spec.AllowedCommands) > 0 {
		env = append(env, "ALLOWED_COMMANDS="+strings.Join(spec.AllowedCommands, ","))
	}
	if spec.Instructions != "" {
		env = append(env, "INSTRUCTIONS="+spec.Instructions)
	}
	if spec.UserID != "" {
		env = append(env, "USER_ID="+spec.UserID)
	}
	if s.cfg.APIURL != "" {
		env = append(env, "API_URL="+s.cfg.APIURL)
	}
	for _, name := range s.cfg.PassEnv {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	return env
}

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

func ptr[T any](v T) *T { return &v }

// find returns the container of a worker, or a NOT_FOUND error.
func (s *Spawner) find(ctx context.Context, id string) (container.InspectResponse, error) {
	c, err := s.docker.ContainerInspect(ctx, ContainerName(id))
	if errdefs.IsNotFound(err) {
		return c, &Error{protocol.CodeNotFound, fmt.Errorf("worker %s has no container", id)}
	}
	if err != nil {
		return c, &Error{protocol.CodeUpstreamUnavailable, fmt.Errorf("inspect worker %s: %w", id, err)}
	}
	return c, nil
}

func (s *Spawner) writeStatus(ctx context.Context, id string, fields map[string]any) {
	fields[protocol.StatusFieldUpdatedAt] = protocol.FormatTime(s.now())
	if err := s.rdb.HSet(ctx, s.keys.Status(id), fields).Err(); err != nil {
		s.log.Warn("status not written", "worker_id", id, "err", err)
	}
}

func (s *Spawner) lifecycle(ctx context.Context, id string, ev protocol.Event, detail map[string]any) {
	l := protocol.Lifecycle{WorkerID: id, Event: ev, Source: protocol.SourceSpawner, Timestamp: s.now(), Detail: detail}
	doc, err := l.Encode()
	if err != nil {
		return
	}
	if err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: s.keys.Lifecycle(), Values: protocol.Values(doc)}).Err(); err != nil {
		s.log.Warn("lifecycle event not written", "worker_id", id, "event", ev, "err", err)
	}
}
