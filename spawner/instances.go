package spawner

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/go-units"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/images"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// instances are the workers' instances on this host's engine as the
// spawner makes and ends them: an instance's spec (the wrapper's
// environment, limits, mounts, sealing), its create, its lookup by
// worker and its removal. It owns nothing in Redis.
type instances struct {
	*env
	cfg      *Config
	engine   engine.Engine
	images   *images.Builder
	projects *projectImages
	seals    *sealing

	cpuOnce    sync.Once // reads engineCPUs, once
	engineCPUs int
	// gvisorSeen: the engine was found to have WORKER_GVISOR_RUNTIME.
	gvisorSeen atomic.Bool
}

// createContainer makes a worker's container from img and returns its
// id; a container the same command made meanwhile (a delivery of it on
// another manager) is taken as it is. An image removed since EnsureImage
// last saw it (an operator's docker rmi) is made again, once.
func (in *instances) createContainer(ctx context.Context, id, commandID string, spec protocol.WorkerSpec, img *images.Image, redisURL string, now time.Time, o *createOpts) (string, error) {
	for attempt := 0; ; attempt++ {
		cid, err := in.engine.Create(ctx, in.instanceSpec(id, commandID, spec, img.Tag, redisURL, now, o))
		switch {
		case err == nil:
			return cid, nil
		case errors.Is(err, engine.ErrConflict): // made meanwhile by the same command elsewhere
			c, err := in.find(ctx, id)
			if err != nil {
				return "", err
			}
			return c.ID, nil
		case errors.Is(err, engine.ErrNotFound) && attempt == 0:
			in.images.Forget(img.Tag)
			again, ierr := in.workerImage(ctx, id, spec)
			if ierr != nil {
				return "", ierr
			}
			*img = again
		default:
			return "", engineError(err, "create container of %s", id)
		}
	}
}

// hostNetwork reports whether workers share the host's network
// (WORKER_NETWORK_MODE's default) or have none: their containers have no
// address of their own to look up.
func (in *instances) hostNetwork() bool {
	return in.cfg.NetworkMode == "host" || in.cfg.NetworkMode == "none" || in.seals.enabled()
}

// instanceSpec is a worker's instance: labels, environment, limits and
// mounts (the engine adds the hardening every worker gets).
func (in *instances) instanceSpec(id, commandID string, spec protocol.WorkerSpec, image, redisURL string, now time.Time, o *createOpts) engine.Spec {
	caps, _ := protocol.NormalizeCapabilities(spec.Capabilities)
	capNames := make([]string, len(caps))
	for i, c := range caps {
		capNames[i] = string(c)
	}
	labels := map[string]string{
		protocol.LabelManaged: "true", protocol.LabelWorkerID: id, ctlplane.LabelAgentType: string(spec.AgentType),
		ctlplane.LabelKind: string(spec.Kind), ctlplane.LabelProjectID: spec.ProjectID,
		protocol.LabelCreatedAt: protocol.FormatTime(now), protocol.LabelKeyPrefix: in.keys.Prefix,
		ctlplane.LabelCapabilities: strings.Join(capNames, ","), ctlplane.LabelImage: image, ctlplane.LabelHost: in.Host(),
	}
	if commandID != "" {
		labels[ctlplane.LabelCommandID] = commandID
	}
	is := engine.Spec{Name: ContainerName(id), Image: image, Env: in.workerEnv(id, spec, redisURL), Labels: labels, User: "1000:1000",
		StopTimeout: in.cfg.StopTimeout, Network: in.cfg.NetworkMode, Runtime: in.engineRuntime(spec),
		Limits:     engine.Limits{Memory: in.memory(spec), CPUs: in.cpus(spec), Pids: in.pids(spec), Disk: in.disk(spec)},
		Containers: slices.Contains(caps, protocol.CapDocker)}
	if is.Limits.Disk > 0 {
		is.Env = append(is.Env, protocol.EnvDiskLimit+"="+strconv.FormatInt(is.Limits.Disk, 10))
	}
	if in.cfg.ProjectVolumes && spec.ProjectID != "" {
		is.Mounts = projectMounts(in.keys.Prefix, spec)
		is.Env = append(is.Env, "WORKSPACE=/home/worker/workspace")
	}
	if in.seals.enabled() {
		in.seals.mount(id, &is, o)
	}
	is.Env = append(is.Env, poolEnv(spec, *o)...)
	return is
}

func (in *instances) workerEnv(id string, spec protocol.WorkerSpec, redisURL string) []string {
	env := []string{
		"WORKER_ID=" + id, "REDIS_URL=" + redisURL, "WORKER_KEY_PREFIX=" + in.keys.Prefix, protocol.EnvWorkerHost + "=" + in.Host(),
		"AGENT_TYPE=" + string(spec.AgentType), "WORKER_KIND=" + string(spec.Kind),
		"SHUTDOWN_GRACE=" + (in.cfg.StopTimeout - 10*time.Second).String(),
		"HEARTBEAT_INTERVAL=" + in.cfg.HeartbeatInterval.String(),
		protocol.EnvStreamMaxLen + "=" + strconv.FormatInt(in.cfg.StreamMaxLen, 10),
		protocol.EnvRunRetention + "=" + in.cfg.RunRetention.String(),
		protocol.EnvRetryAttempts + "=" + strconv.Itoa(in.cfg.Retry.Attempts),
		protocol.EnvRetryBackoffMS + "=" + protocol.FormatRetryBackoffMS(in.cfg.Retry.BackoffMS),
	}
	if v := in.cfg.RedisWait.Replicas; v != "" {
		env = append(env, protocol.EnvRedisWaitReplicas+"="+v)
	}
	if v := in.cfg.RedisWait.Timeout; v != "" {
		env = append(env, protocol.EnvRedisWaitTimeout+"="+v)
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
	if p := spec.BoundProject(); p != "" {
		env = append(env, protocol.EnvWorkerProject+"="+p)
	}
	if spec.Model != "" {
		env = append(env, "AGENT_MODEL="+spec.Model)
	}
	if v, err := protocol.EncodeMCPServers(spec.MCPServers); err == nil && v != "null" {
		env = append(env, protocol.EnvMCPServers+"="+v) // refused at create when invalid
	}
	if v, err := protocol.EncodeGitDefault(spec.Git); err == nil && v != "" {
		env = append(env, protocol.EnvGitDefault+"="+v) // refused at create when invalid
	}
	if in.cfg.APIURL != "" {
		env = append(env, "API_URL="+in.cfg.APIURL)
	}
	if in.cfg.ModelPrices != "" {
		env = append(env, protocol.EnvModelPrices+"="+in.cfg.ModelPrices)
	}
	for _, name := range in.cfg.PassEnv {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for k, v := range in.cfg.WorkerEnv {
		env = append(env, k+"="+v)
	}
	for k, v := range spec.Env {
		if !protocol.ReservedEnv(k) { // refused at create; never taken
			env = append(env, k+"="+v)
		}
	}
	return env
}

// find returns the instance of a worker, or a NOT_FOUND error.
func (in *instances) find(ctx context.Context, id string) (engine.Instance, error) {
	c, err := in.engine.Inspect(ctx, ContainerName(id))
	if errors.Is(err, engine.ErrNotFound) {
		return c, noContainer(id)
	}
	if err != nil {
		return c, engineError(err, "inspect worker %s", id)
	}
	return c, nil
}

// removeContainer stops (graceful: SIGTERM, then the stop timeout) or
// kills a worker's container and removes it; a container already gone is
// no error.
func (in *instances) removeContainer(ctx context.Context, id string, graceful bool) error {
	c, err := in.find(ctx, id)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if graceful && c.State.Up() {
		if c.State == engine.Suspended {
			// A paused process cannot take SIGTERM: wake it first.
			_ = in.engine.Resume(ctx, c.ID)
		}
		// Stopping may take the whole stop timeout: a context of its own.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.StopTimeout+15*time.Second)
		defer cancel()
		if err := in.engine.Stop(sctx, c.ID, in.cfg.StopTimeout); err != nil && !errors.Is(err, engine.ErrNotFound) {
			return engineError(err, "stop worker %s", id)
		}
	}
	if err := in.engine.Remove(ctx, c.ID); err != nil && !errors.Is(err, engine.ErrNotFound) && !in.goneSoon(ctx, c.ID) {
		return engineError(err, "remove worker %s", id)
	}
	return nil
}

// goneSoon waits (up to 10 s) for a container that someone else is
// removing ("removal already in progress"), and says whether it went.
func (in *instances) goneSoon(ctx context.Context, containerID string) bool {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, err := in.engine.Inspect(ctx, containerID); errors.Is(err, engine.ErrNotFound) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return false
}

// stateNow inspects a worker again, after the engine refused a pause or
// an unpause that another caller may have done first ("": unknown).
func (in *instances) stateNow(ctx context.Context, id string) engine.State {
	c, err := in.find(ctx, id)
	if err != nil {
		return ""
	}
	return c.State
}

func (in *instances) memory(spec protocol.WorkerSpec) int64 {
	if spec.Limits.Memory != "" {
		if n, err := units.RAMInBytes(spec.Limits.Memory); err == nil {
			return n
		}
	}
	return in.cfg.MemoryLimit
}

func (in *instances) disk(spec protocol.WorkerSpec) int64 {
	if n := protocol.MemoryBytes(spec.Limits.Disk); n > 0 {
		return n
	}
	return in.cfg.DiskLimit
}

func (in *instances) cpus(spec protocol.WorkerSpec) float64 {
	if spec.Limits.CPUs > 0 {
		return spec.Limits.CPUs
	}
	return in.cfg.CPULimit
}

func (in *instances) pids(spec protocol.WorkerSpec) int64 {
	if spec.Limits.Pids > 0 {
		return spec.Limits.Pids
	}
	return in.cfg.PidsLimit
}

// checkLimits refuses (INVALID_COMMAND) a spec that asks for more cores
// than the engine has. The memory floor is the protocol's own check.
// runtime is the sandbox spec's worker runs in: its own, else the
// manager's WORKER_RUNTIME.
func (in *instances) runtime(spec protocol.WorkerSpec) protocol.Runtime {
	if spec.Runtime != "" {
		return spec.Runtime
	}
	if in.cfg.Runtime != "" {
		return in.cfg.Runtime
	}
	return protocol.RuntimeRunc
}

// engineRuntime is the engine's name of spec's runtime ("": its default).
func (in *instances) engineRuntime(spec protocol.WorkerSpec) string {
	if in.runtime(spec) == protocol.RuntimeGVisor {
		return in.cfg.GVisorRuntime
	}
	return ""
}

// checkRuntime refuses a runtime this manager cannot run: gVisor's sandbox
// has no network stack to the outside (runsc --network=none), so only a
// sealed worker, whose way out is its gateway's sockets, works in it; and
// the engine must have it registered. The engine's answer is asked at
// each gVisor create until it has the runtime (an operator may register
// it while the manager runs), then kept.
func (in *instances) checkRuntime(ctx context.Context, spec protocol.WorkerSpec) error {
	if in.runtime(spec) != protocol.RuntimeGVisor {
		return nil
	}
	if !in.seals.enabled() {
		return errorf(protocol.CodeRuntimeUnavailable, "spec.runtime: gvisor runs sealed workers only, and this manager's are not (WORKER_NETWORK_MODE=%s)", in.cfg.NetworkMode)
	}
	name := in.cfg.GVisorRuntime
	if name == "" {
		return errorf(protocol.CodeRuntimeUnavailable, "spec.runtime: gvisor, but WORKER_GVISOR_RUNTIME is empty")
	}
	if in.gvisorSeen.Load() {
		return nil
	}
	info, err := in.engine.Info(ctx)
	if err != nil {
		return engineError(err, "the engine's runtimes")
	}
	if info.Runtimes != nil && !slices.Contains(info.Runtimes, name) {
		return errorf(protocol.CodeRuntimeUnavailable, "spec.runtime: gvisor, but the engine %s has no runtime %s (WORKER_GVISOR_RUNTIME; it has %s): run `make setup`, or register runsc in /etc/docker/daemon.json",
			info.Name, name, strings.Join(info.Runtimes, ", "))
	}
	in.gvisorSeen.Store(true)
	return nil
}

func (in *instances) checkLimits(ctx context.Context, spec protocol.WorkerSpec) error {
	if spec.Limits.CPUs == 0 {
		return nil
	}
	in.cpuOnce.Do(func() {
		if info, err := in.engine.Info(ctx); err == nil {
			in.engineCPUs = info.CPUs
		}
	})
	if in.engineCPUs > 0 && spec.Limits.CPUs > float64(in.engineCPUs) {
		return errorf(protocol.CodeInvalidCommand, "spec.limits.cpus: %g, but the engine has %d cores", spec.Limits.CPUs, in.engineCPUs)
	}
	return nil
}
