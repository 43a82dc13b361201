package spawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/agentvisor/agentvisor/envconf"
	"github.com/agentvisor/agentvisor/protocol"
	dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Config is the spawner's configuration, filled from the environment by
// ConfigFromEnv and validated at start. Each field's variable, default
// and parser are in configVars, the one table of them.
type Config struct {
	RedisURL        string        // REDIS_URL (required)
	Keys            protocol.Keys // WORKER_KEY_PREFIX
	MaxWorkers      int           // MAX_CONCURRENT_WORKERS; paused workers count
	CreationTimeout time.Duration // WORKER_CREATION_TIMEOUT: a queued create gives up after it
	MemoryLimit     int64         // WORKER_MEMORY_LIMIT, bytes
	CPULimit        float64       // WORKER_CPU_LIMIT
	PidsLimit       int64         // WORKER_PIDS_LIMIT
	StopTimeout     time.Duration // WORKER_STOP_TIMEOUT; the wrapper's grace is 10 s shorter
	NetworkMode     string        // WORKER_NETWORK_MODE
	GatewayDir      string        // GATEWAY_DIR
	SpareNetns      int           // SEALED_SPARE_NETNS
	// Runtime (WORKER_RUNTIME) is the sandbox of a worker whose spec
	// names none; GVisorRuntime (WORKER_GVISOR_RUNTIME) is the engine's
	// name for gVisor (a Docker runtime of daemon.json, a Kubernetes
	// RuntimeClass).
	Runtime            protocol.Runtime
	GVisorRuntime      string
	RedisURLForWorkers string // WORKER_REDIS_URL: the Redis URL as workers see it (default REDIS_URL; made plain for sealed workers: sealSentinelURL)
	// DiskLimit (WORKER_DISK_LIMIT, bytes; 0: none) bounds what a worker
	// may write: a filesystem of that size of its own under DiskDir
	// (WORKER_DISK_DIR) on Docker, ephemeral storage on Kubernetes.
	DiskLimit int64
	DiskDir   string
	// RedisWait is REDIS_WAIT_REPLICAS and REDIS_WAIT_TIMEOUT as given
	// ("" when unset), passed to the workers: WAIT's policy for their
	// writes that matter (protocol.ParseWaitPolicy; its default follows
	// each URL's kind).
	RedisWait struct{ Replicas, Timeout string }
	APIURL    string // API_URL, passed to workers
	// ModelPrices (MODEL_PRICES, checked at start with
	// protocol.ParseModelPrices) is passed to every worker as it is: the
	// prices a Droid worker's cost estimate and budgets are made with.
	ModelPrices string
	// PassEnv names host variables passed to every worker (secrets from the
	// host's environment only): WORKER_PASS_ENV.
	PassEnv []string
	// WorkerEnv (WORKER_ENV, a JSON object of names and values) is set in
	// every worker's environment by the operator: unlike a spec's env it
	// may set the runtime's own variables (AGENT_BIN, AGENT_ARGS, ...).
	WorkerEnv    map[string]string
	IdleTimeout  time.Duration // IDLE_TIMEOUT_SECONDS: an idle worker is paused
	PauseTimeout time.Duration // PAUSE_TIMEOUT: a paused worker is hibernated (removed if it cannot be)
	// HibernateAfter (HIBERNATE_AFTER): a long-lived worker idle (running
	// or paused) this long is hibernated (0: only the pause timeout does).
	HibernateAfter time.Duration
	// At the limit a create hibernates the long-lived worker idle or
	// paused longest, idle at least EvictIdleAfter and with no task
	// waiting, instead of queueing (EVICT_IDLE_AFTER, default 1m: a worker
	// between a consumer's tasks keeps its slot);
	// KeepIdleAtLimit (EVICT_IDLE_AFTER=off) queues the create instead.
	KeepIdleAtLimit bool
	EvictIdleAfter  time.Duration
	// ReplaceDead (REPLACE_DEAD_WORKERS): a long-lived worker whose
	// container ended without the runtime asking (crash, OOM, engine stop,
	// heartbeat expired) gets a new incarnation under its id, which serves
	// the tasks still waiting on its input.
	ReplaceDead bool
	// ReplaceDegradedAfter (REPLACE_DEGRADED_AFTER): a worker idle and
	// degraded this long is retired and replaced (0: never).
	ReplaceDegradedAfter time.Duration
	BaseImage            string // WORKER_BASE_IMAGE
	// ProjectBases (PROJECT_IMAGE_BASES) are the images a spec's project
	// image may start from; ProjectBuildTimeout
	// (PROJECT_IMAGE_BUILD_TIMEOUT) bounds each build of one.
	ProjectBases        []string
	ProjectBuildTimeout time.Duration
	ProjectVolumes      bool // WORKER_PROJECT_VOLUMES: a per-project volume for the agent's home
	// VolumeRetention (VOLUME_RETENTION): a project volume no worker used
	// this long is removed by the leader.
	VolumeRetention time.Duration
	// PruneBuildCache (GC_PRUNE_BUILD_CACHE): the image GC also prunes the
	// engine's whole build cache (it carries no owner).
	PruneBuildCache bool
	ManagerID       string // MANAGER_ID: the consumer name in the managers group
	// HeartbeatInterval (HEARTBEAT_INTERVAL) is given to the workers; a
	// running worker whose heartbeat key expired (3 intervals) is dead.
	HeartbeatInterval time.Duration
	// ReconcileInterval (RECONCILE_INTERVAL): how often labelled
	// containers and Redis are reconciled.
	ReconcileInterval time.Duration
	// CreationGrace (CREATION_GRACE): a labelled container younger than
	// this is not an orphan yet (its create may be in flight).
	CreationGrace time.Duration
	// Pools (POOLS: a JSON array of pool templates, or POOLS_FILE: a path
	// to one): warm pools and pool sizes (pools.go).
	Pools []PoolTemplate
	// WorkerACL (WORKER_REDIS_ACL: auto, on, off): whether each worker
	// connects to Redis as a user of its own (Redis 6+ ACL). auto uses
	// ACLs when the Redis offers them and says once when it does not.
	WorkerACL string
	// LeaseTTL (LEASE_TTL): how long a lease lasts unless renewed: a
	// queued or admitted create, a retirement, the leader's lease, and the
	// idle time after which another manager claims a dead manager's
	// commands. A manager's crash costs at most one lease.
	LeaseTTL time.Duration
	// MaxReplacements (MAX_REPLACEMENTS): a worker that keeps dying before
	// it completes a task is replaced at most this many times in a row,
	// after ReplaceBackoff (REPLACE_BACKOFF) doubled each time.
	MaxReplacements int
	ReplaceBackoff  time.Duration
	// Retry (RETRY_ATTEMPTS, RETRY_BACKOFF_MS) fills what a task's retry
	// policy leaves out, here (a dead worker's task put back) and in the
	// workers, which get it in their environment.
	Retry protocol.RetryPolicy
	// Retention (RETENTION): how long a retired worker's status hash and
	// streams stay in Redis.
	Retention time.Duration
	// RunRetention (RUN_RETENTION): how long a run hash lives after its
	// terminal state; passed to the workers.
	RunRetention time.Duration
	// StreamMaxLen (STREAM_MAXLEN): the approximate MAXLEN of every XADD;
	// passed to the workers.
	StreamMaxLen int64
	// ReplyTTL (REPLY_TTL): a reply stream expires this long after its
	// last reply.
	ReplyTTL time.Duration
	// HostID (HOST_ID, the engine's name): the host this manager's engine
	// is, in a fleet of hosts sharing one Redis (hosts.go). Managers of one
	// engine share it.
	HostID string
	// HostLabels (HOST_LABELS, "k=v,k=v"): what a spec's placement may ask
	// of this host.
	HostLabels map[string]string
	// HostTTL (HOST_TTL): a host whose managers renewed it no longer for
	// this long is lost, and its dead workers are retired by another
	// host's manager.
	HostTTL time.Duration
}

// sealSentinelURL turns a sentinel WORKER_REDIS_URL into what a sealed
// worker connects with. Its redis.sock reaches the primary the gateway's
// sentinels name (gateway/README.md), so the worker's URL names one
// server: redis:// (rediss:// for rediss+sentinel://) with the master's
// name as host, the data user's credentials and db, and no sentinel
// credentials (the worker never talks to a sentinel). Over TLS the
// master's name is the server name the wrapper checks: every server's
// certificate must name it. WAIT's default stays a sentinel URL's (one
// replica), given to the workers as REDIS_WAIT_REPLICAS.
func (c *Config) sealSentinelURL(wu protocol.RedisURL) error {
	plain := protocol.RedisURL{TLS: wu.TLS, Addrs: []string{net.JoinHostPort(wu.Master, protocol.DefaultRedisPort)},
		DB: wu.DB, Username: wu.Username, Password: wu.Password}
	if _, err := protocol.ParseRedisURL(plain.String()); err != nil || strings.ContainsAny(wu.Master, ":%") {
		return envconf.Errorf("WORKER_REDIS_URL", "%w: sealed workers reach the primary by the master's name, which must be a host name (letters, digits, '-', '.', '_')", ErrSealedMasterName)
	}
	policy, _ := protocol.ParseWaitPolicy(c.RedisWait.Replicas, c.RedisWait.Timeout, wu)
	if c.RedisWait.Replicas == "" {
		c.RedisWait.Replicas = strconv.Itoa(policy.Replicas)
	}
	c.RedisURLForWorkers = plain.String()
	return nil
}

// ErrGVisorUnsealed is the error of gVisor asked for workers that are not
// sealed: the sandbox runs with no network stack to the outside
// (--network=none), its way out the gateway's sockets.
var ErrGVisorUnsealed = errors.New("spawner: gVisor runs sealed workers only")

// ErrSealedMasterName is the error of a sentinel WORKER_REDIS_URL whose
// master's name cannot be the host of a sealed worker's Redis URL.
var ErrSealedMasterName = errors.New("spawner: the sentinel master's name cannot be a sealed worker's Redis host")

// ConfigFromEnv reads the configuration; errors name the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if err := envconf.Load(getenv, configVars(&c)); err != nil {
		return Config{}, err
	}
	if c.RedisURLForWorkers == "" {
		c.RedisURLForWorkers = c.RedisURL
	}
	wu, err := protocol.ParseRedisURL(c.RedisURLForWorkers)
	if err != nil {
		return Config{}, envconf.Errorf("WORKER_REDIS_URL", "%w", err)
	}
	if _, err := protocol.ParseWaitPolicy(c.RedisWait.Replicas, c.RedisWait.Timeout, wu); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if c.Runtime == protocol.RuntimeGVisor && c.NetworkMode != NetworkSealed {
		return Config{}, envconf.Errorf("WORKER_RUNTIME", "gvisor runs sealed workers only (WORKER_NETWORK_MODE is %q, want sealed): %w", c.NetworkMode, ErrGVisorUnsealed)
	}
	if c.NetworkMode == NetworkSealed && wu.Sentinel {
		if err := c.sealSentinelURL(wu); err != nil {
			return Config{}, err
		}
	}
	if c.Pools, err = poolsFromEnv(getenv); err != nil {
		return Config{}, envconf.Errorf("POOLS", "%w", err)
	}
	if c.ManagerID == "" {
		// Managers of several engines on one machine (HOST_ID told apart)
		// get consumer names of their own: one name shared would have each
		// serve the others' pending commands.
		c.ManagerID, _ = os.Hostname()
		if c.HostID != "" && c.HostID != c.ManagerID {
			c.ManagerID += "-" + c.HostID
		}
	}
	return c, nil
}

// Usage is the worker-manager's help text: every variable it reads.
func Usage() string {
	return envconf.Usage("worker-manager", "the control plane of the workers of one host (see spawner/README.md)",
		managerVars(&Config{}, &OpsConfig{}, &EngineConfig{}))
}

// managerVars is the worker-manager's whole table: Config's variables,
// then OpsConfig's, then EngineConfig's. Its --help and its section of docs/configuration.md
// (TestConfigTables) are made from it.
func managerVars(c *Config, o *OpsConfig, e *EngineConfig) []envconf.Var {
	return append(append(configVars(c), opsVars(o)...), engineVars(e)...)
}

// configVars is the manager's table of variables: each one's name,
// default, parser, documentation (Markdown, the Meaning of its row in
// docs/configuration.md) and the field of c it fills. ConfigFromEnv
// reads it.
func configVars(c *Config) []envconf.Var {
	return []envconf.Var{
		{Name: "REDIS_URL", Required: true, Value: envconf.Func(c.setRedisURL), Doc: "the manager's Redis: `redis://[[user]:password@]host:port/db`, `rediss://...` (TLS), or Redis Sentinel, `redis+sentinel://[[user]:password@]host:port,host:port,.../master/db[?sentinel_password=...]` (`rediss+sentinel://` with TLS): [PROTOCOL.md](../protocol/PROTOCOL.md#redis-url); with Sentinel the manager's client follows the primary, and each new connection makes the leader restore the worker users the server lacks"},
		{Name: "WORKER_REDIS_URL", DefaultDoc: "`REDIS_URL`", Value: envconf.String(&c.RedisURLForWorkers), Doc: "Redis as the workers see it (any of the same forms; with ACLs each worker's user replaces the user and password, the sentinels' credentials stay; sealed workers get a sentinel URL as `redis://` naming the master, their gateway following the primary: [spawner/README.md](../spawner/README.md#sealed-workers))"},
		{Name: protocol.EnvRedisWaitReplicas, DefaultDoc: "`1` for a sentinel URL, `0` otherwise", Value: envconf.String(&c.RedisWait.Replicas),
			Doc: "the writes that matter (a task's output, a task sent, a command) wait for this many replicas (`WAIT`): a failover loses none of them; `0`: no WAIT (passed to the workers when set; clients have `client.Tasks.Wait` and `client.Commands.Wait`, and `redisconn.Policy` reads it)"},
		{Name: protocol.EnvRedisWaitTimeout, DefaultDoc: "`" + envconf.FormatDuration(protocol.DefaultRedisWaitTimeout) + "`", Value: envconf.String(&c.RedisWait.Timeout),
			Doc: "how long one such WAIT may take (a duration, or milliseconds; passed to the workers when set; `redisconn.Policy` reads it)"},
		{Name: "WORKER_KEY_PREFIX", Default: protocol.DefaultPrefix, Value: envconf.Func(c.setKeys), Doc: "first segment of every Redis name; also scopes the containers a manager owns"},
		{Name: "MAX_CONCURRENT_WORKERS", Default: "10", Value: envconf.Int(&c.MaxWorkers, 1), Doc: "slots of this host; paused workers count (a fleet has the sum of its hosts')"},
		{Name: "WORKER_CREATION_TIMEOUT", Default: "5m", Value: envconf.Duration(&c.CreationTimeout), Doc: "a queued create gives up with `RESOURCE_EXHAUSTED`"},
		{Name: "WORKER_MEMORY_LIMIT", Default: "512m", Value: envconf.SizeMin(&c.MemoryLimit, 6<<20), Doc: "memory per container; a spec's `limits.memory` overrides it"},
		{Name: "WORKER_CPU_LIMIT", Default: "0.5", Value: envconf.PositiveFloat(&c.CPULimit), Doc: "cores per container; `limits.cpus` overrides it"},
		{Name: "WORKER_PIDS_LIMIT", Default: "512", Value: envconf.Int(&c.PidsLimit, 16), Doc: "processes per container; `limits.pids` overrides it"},
		{Name: "WORKER_DISK_LIMIT", Default: "10g", Value: envconf.Func(c.setDiskLimit), Doc: "what a worker may write (its workspace, home and temporary directories together; a write past it fails with `ENOSPC`, and the task's output and a `DISK_FULL` warning say so); a spec's `limits.disk` overrides it; `0`: no limit. On Docker each worker gets an ext4 filesystem of this size of its own, a sparse file loop-mounted under `WORKER_DISK_DIR` (the manager must be root on the host, in the Docker daemon's mount namespace), over a read-only root; on Kubernetes it is the pod's ephemeral-storage limit ([SECURITY.md](../SECURITY.md#disk))"},
		{Name: "WORKER_DISK_DIR", Default: dockerengine.DefaultDiskDir, Value: envconf.String(&c.DiskDir), Doc: "where the workers' disks are (a directory per key prefix: a sparse file and its mount point per worker, and per project volume, which keeps its disk across incarnations until the volume is removed)"},
		{Name: "WORKER_STOP_TIMEOUT", Default: "30s", Value: envconf.DurationMin(&c.StopTimeout, 12*time.Second), Doc: "docker stop timeout (at least 12 s); the wrapper's grace is 10 s shorter"},
		{Name: "WORKER_NETWORK_MODE", Default: NetworkSealed, Value: envconf.String(&c.NetworkMode), Doc: "the containers' network mode: `sealed` (no network of their own: Redis, the model API and the allowlisted egress through the host's `worker-gateway`, which must run beside the engine, [spawner/README.md](../spawner/README.md#sealed-workers)), or a Docker network mode (`host`, `none`, ...), an opt-in to less isolation"},
		{Name: "GATEWAY_DIR", Default: "/run/agentvisor/gateway", Value: envconf.String(&c.GatewayDir), Doc: "the directory of this host's `worker-gateway` (its control socket, a socket directory per sealed worker)"},
		{Name: "SEALED_SPARE_NETNS", Default: "2", Value: envconf.Int(&c.SpareNetns, 0), Doc: "network namespaces (each held by a tiny container) kept ready for sealed workers, so that a create does not wait for the engine to make one; each serves one worker and goes with it; `0`: none"},
		{Name: "WORKER_RUNTIME", Default: string(protocol.RuntimeRunc), Value: envconf.Func(c.setRuntime), Doc: "the sandbox of a worker whose spec names no `runtime`: `runc`, or `gvisor` (gVisor's `runsc`: a kernel of its own in user space between the agent and the host's; sealed workers only, so it wants `WORKER_NETWORK_MODE=sealed`; its cost and limits: [SECURITY.md](../SECURITY.md#gvisor))"},
		{Name: "WORKER_GVISOR_RUNTIME", Default: "runsc", Value: envconf.String(&c.GVisorRuntime), Doc: "the engine's name for gVisor: a Docker runtime of `/etc/docker/daemon.json` (`make setup` registers `runsc`, with `--network=none --host-uds=open`), or on Kubernetes a RuntimeClass's name (over `K8S_RUNTIME_CLASS`); a Docker engine without it has a gVisor create answered `RUNTIME_UNAVAILABLE`"},
		{Name: "WORKER_PASS_ENV", Default: "ANTHROPIC_API_KEY,ANTHROPIC_BASE_URL,FACTORY_API_KEY,OPENAI_API_KEY,OPENAI_BASE_URL,DROID_BASE_URL",
			Value: envconf.List(&c.PassEnv), Doc: "host variables passed to every worker: secrets come from the host's environment only"},
		{Name: "WORKER_ENV", Value: envconf.Func(c.setWorkerEnv), Doc: "a JSON object of variables set in every worker by the operator (it may set the runtime's own, e.g. `{\"AGENT_ARGS\":\"--verbose\"}`, but not `WORKER_ID`, `REDIS_URL`, `WORKER_KEY_PREFIX` or `MODEL_PRICES`); a create's `spec.env` may not set the runtime's own (`INVALID_COMMAND`: the list is in [PROTOCOL.md](../protocol/PROTOCOL.md#commands-and-replies))"},
		{Name: "POOLS", Doc: "warm pools and pool sizes ([`spawner/pools.go`](../spawner/pools.go)): a JSON array of templates `{\"name\", \"spec\", \"min_warm\", \"max_total\", \"recycle_after\", \"idle_timeout\", \"size\"}`; a number left out takes the design's policy: `min_warm` 3 (0 for a pool with a `size` or of developers), `max_total` 20, `recycle_after` 10, `idle_timeout` `5m` (a pool's worker, allocated or of its size, idle that long is paused; warm workers wait paused and the pause timeout never retires them). A create whose spec is a template's takes a warm worker (paused, its Claude process already up) instead of a cold create; pools count against the limit and give way to explicit creates"},
		{Name: "POOLS_FILE", Doc: "a file holding the same JSON array as `POOLS`, read instead of `POOLS` when set"},
		{Name: "WORKER_REDIS_ACL", Default: "auto", Value: envconf.Enum(&c.WorkerACL, "auto", "on", "off"), Doc: "`auto`/`on`: each worker connects as a Redis user of its own, confined to its own keys (Redis 6+ ACL; `auto` when the server offers ACLs, `on` fails creates without it); `off`, or a Redis without ACL: every worker gets `WORKER_REDIS_URL`'s credentials (less safe; the manager says so once at start)"},
		{Name: "WORKER_PROJECT_VOLUMES", Default: "true", Value: envconf.Bool(&c.ProjectVolumes), Doc: "a volume per project and agent at `/home/worker` (agent sessions survive the container)"},
		{Name: "VOLUME_RETENTION", Default: "720h", Value: envconf.Duration(&c.VolumeRetention), Doc: "a project volume no worker used this long is removed by the leader; `workerctl volumes` lists them, `-rm` removes one no container uses"},
		{Name: "GC_PRUNE_BUILD_CACHE", Default: "false", Value: envconf.Bool(&c.PruneBuildCache), Doc: "the image GC also prunes the engine's whole build cache (which carries no owner); the GC itself only removes the worker images this prefix used"},
		{Name: "WORKER_BASE_IMAGE", Default: images.DefaultBaseImage, Value: envconf.String(&c.BaseImage), Doc: "what worker images are built on; the spawner's tests build and use it too: a tag of its own keeps a checkout's wrapper apart from another's on a shared engine"},
		{Name: "PROJECT_IMAGE_BASES", Value: envconf.List(&c.ProjectBases), Doc: "the images a spec's `image` may start from (its `base`, its devcontainer's `image`, its Dockerfile's `FROM` and `COPY --from` images), comma-separated: a reference (without a tag, `:latest`) or a prefix ending in `*`; each must be on the host's engine already (no registry is asked); unset: every project image is refused (`IMAGE_NOT_ALLOWED`). A project's build steps run with no network ([spawner/README.md](../spawner/README.md#a-projects-own-image))"},
		{Name: "PROJECT_IMAGE_BUILD_TIMEOUT", Default: "10m", Value: envconf.Duration(&c.ProjectBuildTimeout), Doc: "a build of a project's image (its Dockerfile, or the runtime's layer on it) that runs longer fails the create with `IMAGE_BUILD_FAILED`"},
		{Name: "API_URL", Value: envconf.String(&c.APIURL), Doc: "passed to the workers"},
		{Name: protocol.EnvModelPrices, DefaultDoc: "built-in defaults: the Anthropic models at the prices Claude Code 2.1.197 uses (to be checked against the vendor's list)", Value: envconf.Func(c.setModelPrices), Doc: "the price table a Droid worker estimates its cost with (Droid reports tokens, not dollars): a JSON object `{\"<model id>\": {\"input\": 3, \"output\": 15, \"cache_read\": 0.3, \"cache_write\": 3.75}}`, US dollars per million tokens, every field required, put over the defaults; checked at start (an error names the model and field) and passed to every worker; neither `WORKER_ENV` nor a spec's `env` may set it ([PROTOCOL.md](../protocol/PROTOCOL.md#budgets))"},
		{Name: "MANAGER_ID", DefaultDoc: "hostname (`<hostname>-<HOST_ID>` when `HOST_ID` is set)", Value: envconf.String(&c.ManagerID), Doc: "this manager's consumer name in the `managers` group (a restart under the same name resumes its pending commands first; any other manager claims them after a lease)"},
		{Name: "HOST_ID", DefaultDoc: "the engine's name", Value: envconf.Func(c.setHostID), Doc: "the fleet host this manager's engine is (managers of one engine share it); on every worker it makes ([Fleet](deploy-many-hosts.md#fleet-several-hosts-on-one-redis))"},
		{Name: "HOST_LABELS", ParseEmpty: true, Value: envconf.Func(c.setHostLabels), Doc: "`k=v,k=v`: what a spec's `placement.labels` may ask of this host"},
		{Name: "HOST_TTL", DefaultDoc: fmt.Sprintf("%d × `HEARTBEAT_INTERVAL`", ctlplane.DefaultHostTTLIntervals), Value: envconf.Duration(&c.HostTTL),
			Doc: "a host not renewed this long is lost: its dead workers are retired by another host's manager"},
		{Name: "LEASE_TTL", Default: envconf.FormatDuration(ctlplane.DefaultLeaseTTLSeconds * time.Second), Value: envconf.DurationMin(&c.LeaseTTL, 300*time.Millisecond),
			Doc: "the lease of a queued or admitted create, a retirement, the leader, and the idle time after which another manager claims a dead manager's commands: a manager's crash costs at most this"},
		{Name: "MAX_REPLACEMENTS", Default: "3", Value: envconf.Int(&c.MaxReplacements, 0), Doc: "a worker that keeps dying before it completes a task gets at most this many new incarnations (or replacements) in a row, then `replace_failed` (`REPLACE_LIMIT`)"},
		{Name: "REPLACE_BACKOFF", Default: "1s", Value: envconf.Duration(&c.ReplaceBackoff), Doc: "the wait before a replacement, doubled with each one in a row"},
		{Name: protocol.EnvRetryAttempts, Default: strconv.Itoa(protocol.DefaultRetryAttempts),
			Value: envconf.Func(func(s string) (err error) { c.Retry.Attempts, err = protocol.ParseRetryAttempts(s); return err }),
			Doc:   "attempts in all (the first included) of a task that asks for retries (`retry`) without saying how many; a dead worker's task is put back on its input for its next incarnation (or its replacement) while it has attempts left (passed to the workers)"},
		{Name: protocol.EnvRetryBackoffMS, Default: protocol.FormatRetryBackoffMS(protocol.DefaultRetryBackoffMS),
			Value: envconf.Func(func(s string) (err error) { c.Retry.BackoffMS, err = protocol.ParseRetryBackoffMS(s); return err }),
			Doc:   "ms before the 2nd, 3rd, ... attempt (the last value repeats) of a task whose `retry` gives no `backoff_ms` (passed to the workers)"},
		{Name: "RETENTION", Default: envconf.FormatDuration(rdb.DefaultRetention), Value: envconf.Duration(&c.Retention), Doc: "a retired worker's status hash and streams and a create command's worker id expire after it"},
		{Name: protocol.EnvStreamMaxLen, Default: strconv.FormatInt(protocol.DefaultStreamMaxLen, 10), Value: envconf.Int(&c.StreamMaxLen, 100),
			Doc: "approximate MAXLEN of every XADD (the manager's and, passed to them, the workers'); input streams are never trimmed by length, only below what their group delivered and no worker holds"},
		{Name: protocol.EnvRunRetention, Default: envconf.FormatDuration(protocol.DefaultRunRetention), Value: envconf.Duration(&c.RunRetention),
			Doc: "a run hash expires this long after its terminal state (passed to the workers)"},
		{Name: "REPLY_TTL", Default: envconf.FormatDuration(rdb.DefaultReplyTTL), Value: envconf.Duration(&c.ReplyTTL), Doc: "a reply stream expires this long after its last reply"},
		{Name: "IDLE_TIMEOUT_SECONDS", Default: "600", Value: envconf.IntOf(&c.IdleTimeout, 1, time.Second), Doc: "seconds: a running worker idle this long is paused"},
		{Name: "PAUSE_TIMEOUT", Default: "30m", Value: envconf.Duration(&c.PauseTimeout), Doc: "a worker paused this long is [hibernated](../protocol/PROTOCOL.md#hibernation) (a developer or warm pool worker is removed)"},
		{Name: "HIBERNATE_AFTER", Default: "0", Value: durationOrOff(&c.HibernateAfter), Doc: "a long-lived worker idle (running or paused) this long is [hibernated](../protocol/PROTOCOL.md#hibernation): its container removed, its id, streams and session kept, woken by the next task (`0`: off, only `PAUSE_TIMEOUT` hibernates)"},
		{Name: "EVICT_IDLE_AFTER", Default: "1m", Value: envconf.Func(c.setEvictIdle), Doc: "at the limit, a create [hibernates](../protocol/PROTOCOL.md#hibernation) the long-lived worker idle or paused longest, once idle this long (`0`: at once), never a busy one or one with a task waiting, instead of queueing; a warm pool's worker gives way first; workers that cannot hibernate (developer workers, those without a spec) are never evicted (`off`: creates queue)"},
		{Name: "REPLACE_DEGRADED_AFTER", Default: "10m", Value: durationOrOff(&c.ReplaceDegradedAfter), Doc: "a worker its own tasks left degraded (its agent failing, crashing) and idle since this long is retired and replaced: a long-lived one with a spec by a new incarnation under its id, a pool's by its pool (`0` or `off`: never; a degraded developer worker takes no shared task meanwhile)"},
		{Name: "REPLACE_DEAD_WORKERS", Default: "true", Value: envconf.Bool(&c.ReplaceDead), Doc: "a long-lived worker whose container ended without being asked (crash, OOM, engine stop, heartbeat expired) gets a new container (a new incarnation) under the same id, which serves the tasks waiting on its input"},
		{Name: "HEARTBEAT_INTERVAL", Default: "10s", Value: envconf.Duration(&c.HeartbeatInterval), Doc: "given to the workers; a running (not paused) worker whose heartbeat key expired (3 intervals) is dead: removed, its task forwarded (or, long-lived, replaced: `REPLACE_DEAD_WORKERS`)"},
		{Name: "RECONCILE_INTERVAL", Default: "60s", Value: envconf.Duration(&c.ReconcileInterval), Doc: "reconciliation of containers and Redis, by the leader (also when it becomes leader) every interval: labelled containers Redis does not know (older than `CREATION_GRACE`) are removed, Redis workers without a container are marked failed, disagreeing statuses fixed"},
		{Name: "CREATION_GRACE", Default: "30s", Value: envconf.Duration(&c.CreationGrace), Doc: "a labelled container younger than this is not an orphan yet (its create may be in flight)"},
	}
}

func (c *Config) setRedisURL(s string) error {
	c.RedisURL = s
	_, err := protocol.ParseRedisURL(s) // the parser's errors never quote the URL
	return err
}

func (c *Config) setKeys(s string) (err error) {
	c.Keys, err = protocol.NewKeys(s)
	return err
}

func (c *Config) setRuntime(s string) error {
	c.Runtime = protocol.Runtime(s)
	if !c.Runtime.Valid() {
		return fmt.Errorf("is %q, want runc or gvisor", s)
	}
	return nil
}

func (c *Config) setWorkerEnv(s string) error {
	if err := json.Unmarshal([]byte(s), &c.WorkerEnv); err != nil {
		return fmt.Errorf("want a JSON object of names and string values such as {\"AGENT_MODEL\":\"x\"}")
	}
	for k := range c.WorkerEnv {
		if k == "WORKER_ID" || k == "REDIS_URL" || k == "WORKER_KEY_PREFIX" {
			return fmt.Errorf("%s is the manager's to set", k)
		}
		if k == protocol.EnvModelPrices {
			return fmt.Errorf("%s is a variable of the manager's own environment: it is checked at start and passed to every worker", k)
		}
	}
	return nil
}

func (c *Config) setModelPrices(s string) error {
	c.ModelPrices = s
	_, err := protocol.ParseModelPrices(s)
	return err
}

func (c *Config) setHostID(s string) error {
	if !protocol.ValidHostID(s) {
		return fmt.Errorf("want [A-Za-z0-9_.-]{1,64}, got %q", s)
	}
	c.HostID = s
	return nil
}

func (c *Config) setHostLabels(s string) (err error) {
	c.HostLabels, err = ctlplane.ParseHostLabels(s)
	return err
}

// setEvictIdle reads EVICT_IDLE_AFTER: off keeps idle workers at the
// limit; a duration (0: any) is the least idle time of one evicted.
func (c *Config) setEvictIdle(s string) error {
	if s == "off" {
		c.KeepIdleAtLimit = true
		return nil
	}
	c.KeepIdleAtLimit = false
	if s == "0" {
		c.EvictIdleAfter = 0
		return nil
	}
	return envconf.Duration(&c.EvictIdleAfter).Set(s)
}

// handBuiltDefaults are the variables whose defaults withDefaults gives
// a Config built in Go that leaves them zero.
var handBuiltDefaults = []string{"LEASE_TTL", "RETENTION", protocol.EnvStreamMaxLen, protocol.EnvRunRetention, "REPLY_TTL", "VOLUME_RETENTION", "REPLACE_BACKOFF", "GATEWAY_DIR", "WORKER_DISK_DIR"}

// setDiskLimit reads WORKER_DISK_LIMIT: 0 (or off) for none, else a size
// of at least a spec's smallest.
func (c *Config) setDiskLimit(s string) error {
	if s == "0" || strings.EqualFold(s, "off") {
		c.DiskLimit = 0
		return nil
	}
	return envconf.SizeMin(&c.DiskLimit, protocol.MinDiskBytes).Set(s)
}

// withDefaults fills what a Config built by hand (not by ConfigFromEnv)
// leaves zero, from configVars.
func withDefaults(c *Config) {
	vars := configVars(c)
	for _, name := range handBuiltDefaults {
		if v := envconf.Lookup(vars, name); v.Value.IsZero() {
			_ = v.SetDefault() // the table's defaults parse
		}
	}
	c.Retry = c.Retry.Resolve(protocol.DefaultRetryPolicy())
	if c.ManagerID == "" {
		c.ManagerID, _ = os.Hostname()
	}
	if c.HostTTL == 0 {
		hb := c.HeartbeatInterval
		if hb == 0 {
			hb, _ = envconf.ParseDuration(envconf.Lookup(vars, "HEARTBEAT_INTERVAL").Default)
		}
		c.HostTTL = ctlplane.DefaultHostTTLIntervals * hb
	}
}

// durationOrOff fills p with a positive duration, or 0 for "0" or "off".
func durationOrOff(p *time.Duration) envconf.Value {
	return envconf.Func(func(s string) error {
		if s == "0" || s == "off" {
			*p = 0
			return nil
		}
		d, err := envconf.ParseDuration(s)
		if err == nil {
			*p = d
		}
		return err
	})
}
