package spawner

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/fleet"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Spawner creates, pauses, unpauses and retires workers' instances on an
// engine (engine.Engine). What it knows is in the instances' labels and Redis, under leases where a process
// holds it while it works, so that a manager that dies at any point costs
// at most one lease (Config.LeaseTTL) and loses nothing.
type Spawner struct {
	*env
	cfg      Config
	engine   engine.Engine
	inst     *instances // the workers' instances on the engine
	seals    *sealing   // this host's gateway, for sealed workers
	instance string     // this process's lease owner id: ManagerID plus a random suffix

	stopOnce sync.Once
	stopping chan struct{} // closed when the manager begins to shut down

	users     *workerUsers    // the workers' Redis users (ACL mode)
	volumes   *projectVolumes // the project volumes on this engine
	warm      *poolWake       // wakes into warm pool workers (poolwake.go)
	answers   *answers        // a retired worker's tasks answered (answers.go)
	busyCheck *busyCheck      // is a worker busy (busy.go)
	admission *admission      // slots for creates and wakes (admission.go)
	hib       *hibernation    // hibernates and wakes long-lived workers (hibernate.go)
	ret       *retirements    // retires workers (retire.go)
	// connected holds a signal when the Redis client made a new
	// connection (RedisConnected); the leader's health loop takes it.
	connected chan struct{}

	obs observer // metrics and manager state (metrics.go); zero: none
}

// New returns a Spawner over eng. images builds the worker images (its
// Redis may be the same client); without a base image of its own it takes
// the configuration's (WORKER_BASE_IMAGE). NewDocker wires one over a
// Docker engine.
func New(cfg Config, eng engine.Engine, rc redis.UniversalClient, builder *images.Builder, log *slog.Logger) *Spawner {
	if log == nil {
		log = slog.Default()
	}
	if builder != nil && builder.BaseImage == "" {
		builder.BaseImage = cfg.BaseImage
	}
	withDefaults(&cfg)
	r := rdb.New(rc, cfg.Keys)
	r.StreamMaxLen, r.ReplyTTL, r.Retention, r.RunRetention = cfg.StreamMaxLen, cfg.ReplyTTL, cfg.Retention, cfg.RunRetention
	e := &env{rdb: r, keys: cfg.Keys, now: time.Now, log: log}
	var info func(ctx context.Context) (engine.Info, error)
	if eng != nil {
		info = eng.Info
	}
	e.fleet = fleet.New(r, cfg.Keys, func() time.Time { return e.now() }, cfg.HostID, info)
	var gw Gateway
	if cfg.NetworkMode == NetworkSealed {
		gw = gateway.NewClient(cfg.GatewayDir)
	}
	seals := &sealing{gw: gw, log: log}
	s := &Spawner{env: e, cfg: cfg, engine: eng, seals: seals, users: newWorkerUsers(r, log, cfg.WorkerACL, cfg.RedisURLForWorkers),
		inst:     &instances{env: e, engine: eng, images: builder, seals: seals, projects: newProjectImages(e, builder, cfg)},
		volumes:  &projectVolumes{env: e, engine: eng, enabled: cfg.ProjectVolumes, retention: cfg.VolumeRetention},
		instance: cfg.ManagerID + "/" + newWorkerID()[:8], stopping: make(chan struct{}), connected: make(chan struct{}, 1)}
	// The parts read the one configuration (tests change it after New).
	s.inst.cfg, s.seals.cfg = &s.cfg, &s.cfg
	s.answers = &answers{env: e, cfg: &s.cfg}
	s.ret = &retirements{env: e, cfg: &s.cfg, inst: s.inst, seals: seals, answers: s.answers, users: s.users,
		reincarnate: s.reincarnate, replace: s.replace}
	s.busyCheck = &busyCheck{keys: cfg.Keys, status: r, runs: r, tasks: r}
	s.admission = &admission{env: e, cfg: &s.cfg, stopping: s.stopping, engine: eng, busy: s.busyCheck, retire: s.retire, hibernate: func(ctx context.Context, id, reason string, graceful bool) error {
		return s.hib.hibernate(ctx, id, reason, graceful)
	}}
	s.warm = &poolWake{env: e, poolFor: s.poolFor, users: s.users, seals: seals, engine: eng, retire: s.retire, ended: e.ended}
	s.hib = &hibernation{env: e, cfg: &s.cfg, instance: s.instance, busyCheck: s.busyCheck, answers: s.answers, seals: seals, users: s.users,
		inst: s.inst, warm: s.warm, admission: s.admission, suspends: s.suspends, pause: s.Pause, unpause: s.Unpause, status: s.Status,
		keepRetiring: s.ret.keepRetiring, incarnate: s.incarnate}
	s.ret.hib = s.hib
	return s
}

// retire retires worker id (retirements.retire); the Spawner's for its
// own paths and its pools.
func (s *Spawner) retire(ctx context.Context, id string, r retirement) (bool, error) {
	return s.ret.retire(ctx, id, r)
}

// BeginShutdown makes every create still waiting for a slot give up at
// once with SHUTTING_DOWN: the manager's exit is bounded by the stop
// timeout, not by the creation queue.
func (s *Spawner) BeginShutdown() { s.stopOnce.Do(func() { close(s.stopping) }) }

func newWorkerID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ContainerName is the name of a worker's container (its instance).
func ContainerName(workerID string) string { return engine.InstanceName(workerID) }

// Create makes a worker: it waits for a slot, ensures the image of the
// spec's agent and capabilities, and starts its container. It returns the
// worker's info; its id is a new UUID.
func (s *Spawner) Create(ctx context.Context, spec protocol.WorkerSpec) (protocol.WorkerInfo, error) {
	return s.CreateFor(ctx, "", spec)
}

// LabelCommandID marks the container a create command made.
//
// Deprecated: use protocol.LabelCommandID.
const LabelCommandID = ctlplane.LabelCommandID

// CreateFor is Create on behalf of a command. The command's id maps to
// one worker id in Redis, so the same command delivered again (its
// manager died at any point of the create) continues that worker: it
// never makes a second container.
//
// A spec that matches a warm pool's template takes one of its warm
// workers when one is ready (see pools.go); otherwise it is made cold.
func (s *Spawner) CreateFor(ctx context.Context, commandID string, spec protocol.WorkerSpec) (protocol.WorkerInfo, error) {
	return s.createCommand(ctx, commandID, spec, nil)
}

// createCommand is CreateFor with a way to forward the command to
// another host of the fleet (nil: the create is made on this host). It
// returns errForwarded when the create went to another host, which
// replies.
func (s *Spawner) createCommand(ctx context.Context, commandID string, spec protocol.WorkerSpec, forward func(ctx context.Context, host string) error) (protocol.WorkerInfo, error) {
	start := time.Now()
	info, err := s.createFor(ctx, commandID, spec, forward)
	if !errors.Is(err, errForwarded) {
		s.obs.createDone(start, err)
	}
	return info, err
}

// createFor is createCommand without the metrics.
func (s *Spawner) createFor(ctx context.Context, commandID string, spec protocol.WorkerSpec, forward func(ctx context.Context, host string) error) (protocol.WorkerInfo, error) {
	if p := s.poolFor(spec); p != nil {
		start := s.now()
		if info, ok, err := s.allocate(ctx, commandID, p, forward); ok || err != nil {
			return info, err
		}
		info, err := s.create(ctx, commandID, spec, createOpts{pool: p.Name, poolState: protocol.PoolAllocated, forward: forward})
		if err == nil {
			s.obs.poolAllocated(p.Name, "cold", s.now().Sub(start))
		}
		return info, err
	}
	return s.create(ctx, commandID, spec, createOpts{forward: forward})
}

// ErrNoDockerEngine refuses a create with DOCKER on an engine whose
// instances cannot run containers of their own (Kubernetes): the create
// fails INVALID_COMMAND with this text, before any image is built.
var ErrNoDockerEngine = errors.New("spawner: the DOCKER capability (an engine inside the worker) is not available on this manager's engine; run such workers on a Docker host")

// createOpts are how a create differs from a command's.
type createOpts struct {
	replacement bool   // it takes the slot its dead predecessor gives back
	hostLost    bool   // a replacement of a worker of a lost host: placed anew
	tryOnly     bool   // admitted at once or not at all (a pool refill gives way to queued creates)
	pool        string // the pool it belongs to
	poolState   string // protocol.PoolWarm, PoolAllocated, PoolMember
	// forward sends the create to another host of the fleet (nil: the
	// create is made on this host only).
	forward func(ctx context.Context, host string) error
	// credentialHosts are the hosts the sealed worker's gateway adds a
	// credential for (set by the create).
	credentialHosts []string
	// modelToken is the sealed worker's token, which its gateway wants on
	// every request of model.sock: made by the create, given to the
	// gateway and to the wrapper (MODEL_SOCKET_TOKEN, in the container's
	// environment like REDIS_URL's password), never to Redis.
	modelToken string
}

// create is CreateFor without the pools.
func (s *Spawner) create(ctx context.Context, commandID string, spec protocol.WorkerSpec, o createOpts) (protocol.WorkerInfo, error) {
	if err := spec.Validate(); err != nil {
		return protocol.WorkerInfo{}, &Error{Code: protocol.CodeInvalidCommand, Err: err}
	}
	if caps, _ := protocol.NormalizeCapabilities(spec.Capabilities); slices.Contains(caps, protocol.CapDocker) && !s.engine.RunsContainers() {
		return protocol.WorkerInfo{}, &Error{Code: protocol.CodeInvalidCommand, Err: ErrNoDockerEngine}
	}
	if spec.Kind == "" {
		spec.Kind = protocol.KindLongLived
	}
	if err := s.inst.checkLimits(ctx, spec); err != nil {
		return protocol.WorkerInfo{}, err
	}
	if err := s.inst.checkRuntime(ctx, spec); err != nil {
		return protocol.WorkerInfo{}, err
	}
	id := newWorkerID()
	fresh := true // no earlier delivery of the command made this worker
	if commandID != "" {
		got, err := s.rdb.CommandWorker(ctx, commandID, id)
		if err != nil {
			return protocol.WorkerInfo{}, redisError(err, "command %s", commandID)
		}
		fresh, id = got == id, got
	}
	member := false
	if !fresh {
		// The command delivered again: its worker may be made, placed on
		// another host, or half made here.
		var err error
		if member, err = s.rdb.IsWorker(ctx, id); err != nil {
			return protocol.WorkerInfo{}, redisError(err, "workers set")
		}
		// A create delivered again whose worker another host makes or runs
		// goes there; a worker of a lost host is answered as Redis knows it
		// (HostWatch retires it).
		if rt, err := s.fleet.Route(ctx, id); err != nil {
			return protocol.WorkerInfo{}, redisError(err, "route %s", id)
		} else if !rt.Here {
			switch {
			case rt.Live && o.forward != nil:
				return s.forwarded(ctx, id, rt.Host, o)
			case member:
				return s.Status(ctx, id)
			case !rt.Live:
				_ = s.rdb.Leave(ctx, id) // its slot was on a lost host: placed anew
			}
		}
	}
	if !member {
		lease, host, err := s.admission.admit(ctx, id, spec.Placement, o)
		if err != nil {
			s.writeStatus(context.WithoutCancel(ctx), id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerFailed),
				protocol.StatusFieldState: string(protocol.WorkerFailed), protocol.StatusFieldError: err.Error()})
			return protocol.WorkerInfo{}, err
		}
		if host != s.Host() {
			return s.forwarded(ctx, id, host, o)
		}
		defer lease.stop()
	}
	info, err := s.build(ctx, id, commandID, spec, member, fresh, o)
	if err != nil && !member {
		// The slot goes back now; had this process died instead, its
		// lease would have run out (and the reconciler would delete the
		// user).
		_ = s.rdb.Leave(context.WithoutCancel(ctx), id)
		if _, ferr := s.inst.find(ctx, id); IsNotFound(ferr) {
			_ = s.users.drop(context.WithoutCancel(ctx), id)
		}
	}
	return info, err
}

// forwarded sends a create placed on another host there and returns
// errForwarded with what is known of the worker. The slot's lease stays
// with the create until that host's manager renews it.
func (s *Spawner) forwarded(ctx context.Context, id, host string, o createOpts) (protocol.WorkerInfo, error) {
	if o.forward == nil {
		_ = s.rdb.Leave(context.WithoutCancel(ctx), id)
		return protocol.WorkerInfo{}, errorf(protocol.CodeConflict, "worker %s is placed on host %s", id, host)
	}
	if err := o.forward(ctx, host); err != nil {
		return protocol.WorkerInfo{}, err
	}
	s.log.Info("create forwarded to the host it was placed on", "worker_id", id, "host", host)
	return protocol.WorkerInfo{WorkerID: id, Status: protocol.ContainerQueued, Host: host}, errForwarded
}

// build makes and starts the container of an admitted create (or of a
// member whose create was cut short), each step idempotent. A fresh
// create (no earlier delivery of its command) has no container to look
// for: it asks the engine only to create and start one.
func (s *Spawner) build(ctx context.Context, id, commandID string, spec protocol.WorkerSpec, member, fresh bool, o createOpts) (protocol.WorkerInfo, error) {
	img, err := s.inst.workerImage(ctx, id, spec)
	if err != nil {
		return protocol.WorkerInfo{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, input := range s.keys.InputsFor(spec.Kind, id) {
		if err := s.rdb.EnsureGroup(cctx, input, protocol.GroupFor(spec.Kind)); err != nil {
			return protocol.WorkerInfo{}, redisError(err, "input group of %s", id)
		}
	}
	now := s.now()
	cid := ""
	err = noContainer(id)
	if !fresh {
		var c engine.Instance
		if c, err = s.inst.find(cctx, id); err == nil {
			cid = c.ID
		}
	}
	switch {
	case IsNotFound(err):
		if !member {
			s.writeStatus(cctx, id, map[string]any{
				protocol.StatusFieldState: string(protocol.WorkerStarting), protocol.StatusFieldContainer: string(protocol.ContainerStarting),
				protocol.StatusFieldAgentType: string(spec.AgentType), protocol.StatusFieldKind: string(spec.Kind),
				protocol.StatusFieldProjectID: spec.ProjectID, protocol.StatusFieldImage: img.Tag,
				protocol.StatusFieldCreatedAt: protocol.FormatTime(now), protocol.StatusFieldHealth: string(protocol.HealthUnknown),
				protocol.StatusFieldSpec: specJSON(spec), protocol.StatusFieldManagerID: s.cfg.ManagerID, protocol.StatusFieldHost: s.Host(),
				protocol.StatusFieldPool: o.pool, protocol.StatusFieldPoolState: o.poolState,
				protocol.StatusFieldIncarnation: 1, protocol.StatusFieldIncarnatedAt: protocol.FormatTime(now)})
		}
		if o.pool != "" {
			if err := s.rdb.AddPoolMember(cctx, o.pool, id); err != nil {
				return protocol.WorkerInfo{}, redisError(err, "pool %s", o.pool)
			}
		}
		if err := s.volumes.touch(cctx, spec); err != nil {
			return protocol.WorkerInfo{}, err
		}
		redisURL, err := s.users.redisURL(cctx, id, spec)
		if err != nil {
			return protocol.WorkerInfo{}, err
		}
		o.modelToken = newModelToken()
		if o.credentialHosts, err = s.seals.open(cctx, id, spec, o.modelToken); err != nil {
			return protocol.WorkerInfo{}, err
		}
		if cid, err = s.inst.createContainer(cctx, id, commandID, spec, &img, redisURL, now, &o); err != nil {
			return protocol.WorkerInfo{}, err
		}
	case err != nil:
		return protocol.WorkerInfo{}, err
	}
	if !member {
		ok, err := s.rdb.Join(cctx, id)
		if err != nil {
			return protocol.WorkerInfo{}, redisError(err, "join workers set")
		}
		if !ok {
			_ = s.engine.Remove(context.WithoutCancel(ctx), cid)
			return protocol.WorkerInfo{}, errorf(protocol.CodeResourceExhausted, "the slot lease of %s ran out before its container was made", id)
		}
	}
	if cid, err = s.engine.Start(cctx, cid); err != nil {
		// The engine refused to start it: the create fails, so the
		// worker goes (had this process died here instead, the
		// reconciler would start it and the command, claimed by another
		// manager, would find it).
		serr := engineError(err, "start container of %s", id)
		if _, rerr := s.retire(ctx, id, retirement{reason: protocol.RemovedStuck, died: true, exitCode: -1, code: serr.Code, msg: serr.Err.Error()}); rerr != nil {
			s.log.Warn("retire a worker that did not start", "worker_id", id, "err", rerr)
		}
		return protocol.WorkerInfo{}, serr
	}
	detail := map[string]any{"container_id": cid, "image": img.Tag, "incarnation": 1}
	if o.pool != "" {
		detail["pool"], detail["pool_state"] = o.pool, o.poolState
	}
	h, err := s.rdb.Started(cctx, id, s.Host(), s.now(), map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning),
		protocol.StatusFieldContainerID: cid}, protocol.Lifecycle{WorkerID: id, Event: protocol.EventCreated, Source: protocol.SourceSpawner,
		Timestamp: s.now(), Detail: detail, Host: s.Host()})
	if err != nil {
		s.log.Warn("status and created event not written", "worker_id", id, "err", err)
	}
	s.log.Info("worker created", "worker_id", id, "agent_type", spec.AgentType, "kind", spec.Kind, "image", img.Tag)
	if err != nil || !s.inst.hostNetwork() {
		return s.Status(ctx, id) // the engine alone knows the address of a container on a network of its own
	}
	info := InfoFromHash(id, h)
	info.Status, info.ContainerID, info.Image = protocol.ContainerRunning, cid, img.Tag
	return info, nil
}

// specJSON is the spec as the status hash keeps it (secrets come from the
// host's environment, never from a spec, so none is stored).
func specJSON(spec protocol.WorkerSpec) string {
	b, _ := json.Marshal(spec)
	return string(b)
}

// ResetContext forgets a project's agent session and its stored context:
// the project's next task starts fresh.
func (s *Spawner) ResetContext(ctx context.Context, agent protocol.AgentType, project string) error {
	if err := s.rdb.ForgetSession(ctx, agent, project); err != nil {
		return redisError(err, "reset context")
	}
	return nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }
