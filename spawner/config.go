package spawner

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"

	"github.com/agentvisor/agentvisor/protocol"
)

// Config is the spawner's configuration, filled from the environment by
// ConfigFromEnv and validated at start.
type Config struct {
	RedisURL           string        // REDIS_URL (required)
	Keys               protocol.Keys // WORKER_KEY_PREFIX
	MaxWorkers         int           // MAX_CONCURRENT_WORKERS (10); paused workers count
	CreationTimeout    time.Duration // WORKER_CREATION_TIMEOUT (5m): a queued create gives up after it
	MemoryLimit        int64         // WORKER_MEMORY_LIMIT (512m), bytes
	CPULimit           float64       // WORKER_CPU_LIMIT (0.5)
	PidsLimit          int64         // WORKER_PIDS_LIMIT (512)
	StopTimeout        time.Duration // WORKER_STOP_TIMEOUT (30s); the wrapper's grace is 10 s shorter
	NetworkMode        string        // WORKER_NETWORK_MODE (host)
	RedisURLForWorkers string        // WORKER_REDIS_URL: the Redis URL as workers see it (default REDIS_URL)
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
	// host's environment only): WORKER_PASS_ENV, default
	// ANTHROPIC_API_KEY,ANTHROPIC_BASE_URL,FACTORY_API_KEY,OPENAI_API_KEY,DROID_BASE_URL.
	PassEnv []string
	// WorkerEnv (WORKER_ENV, a JSON object of names and values) is set in
	// every worker's environment by the operator: unlike a spec's env it
	// may set the runtime's own variables (AGENT_BIN, AGENT_ARGS, ...).
	WorkerEnv    map[string]string
	IdleTimeout  time.Duration // IDLE_TIMEOUT_SECONDS (600): an idle worker is paused
	PauseTimeout time.Duration // PAUSE_TIMEOUT (30m): a paused worker is terminated
	// EvictPaused (EVICT_PAUSED_AFTER set, off by default): at the limit, a
	// create removes the worker paused longest, if it has been paused at
	// least EvictPausedAfter and has no input waiting, instead of queueing.
	EvictPaused      bool
	EvictPausedAfter time.Duration
	// ReplaceDead (REPLACE_DEAD_WORKERS, true): a long-lived worker found
	// dead by its health (heartbeat expired) is replaced by a new worker of
	// the same spec, which gets the tasks still waiting on the old input.
	ReplaceDead    bool
	BaseImage      string // WORKER_BASE_IMAGE (agentvisor/worker-base:latest)
	ProjectVolumes bool   // WORKER_PROJECT_VOLUMES (true): a per-project volume for the agent's home
	// VolumeRetention (VOLUME_RETENTION, 30 days): a project volume no
	// worker used this long is removed by the leader.
	VolumeRetention time.Duration
	// PruneBuildCache (GC_PRUNE_BUILD_CACHE, false): the image GC also
	// prunes the engine's whole build cache (it carries no owner).
	PruneBuildCache bool
	ManagerID       string // MANAGER_ID (hostname, with "-HOST_ID" when HOST_ID is set): the consumer name in the managers group
	// HeartbeatInterval (HEARTBEAT_INTERVAL, 10s) is given to the workers;
	// a running worker whose heartbeat key expired (3 intervals) is dead.
	HeartbeatInterval time.Duration
	// ReconcileInterval (RECONCILE_INTERVAL, 60s): how often labelled
	// containers and Redis are reconciled.
	ReconcileInterval time.Duration
	// CreationGrace (CREATION_GRACE, 30s): a labelled container younger
	// than this is not an orphan yet (its create may be in flight).
	CreationGrace time.Duration
	// Pools (POOLS: a JSON array of pool templates, or POOLS_FILE: a path
	// to one): warm pools and pool sizes (pools.go).
	Pools []PoolTemplate
	// WorkerACL (WORKER_REDIS_ACL: auto, on, off; auto): whether each
	// worker connects to Redis as a user of its own (Redis 6+ ACL). auto
	// uses ACLs when the Redis offers them and says once when it does not.
	WorkerACL string
	// LeaseTTL (LEASE_TTL, 15s): how long a lease lasts unless renewed:
	// a queued or admitted create, a retirement, the leader's lease, and
	// the idle time after which another manager claims a dead manager's
	// commands. A manager's crash costs at most one lease.
	LeaseTTL time.Duration
	// MaxReplacements (MAX_REPLACEMENTS, 3): a worker that keeps dying
	// before it completes a task is replaced at most this many times in a
	// row, after ReplaceBackoff (REPLACE_BACKOFF, 1s) doubled each time.
	MaxReplacements int
	ReplaceBackoff  time.Duration
	// Retention (RETENTION, 24h): how long a retired worker's status hash
	// and streams stay in Redis.
	Retention time.Duration
	// RunRetention (RUN_RETENTION, 24h): how long a run hash lives after
	// its terminal state; passed to the workers.
	RunRetention time.Duration
	// StreamMaxLen (STREAM_MAXLEN, 10000): the approximate MAXLEN of every
	// XADD; passed to the workers.
	StreamMaxLen int64
	// ReplyTTL (REPLY_TTL, 1h): a reply stream expires this long after its
	// last reply.
	ReplyTTL time.Duration
	// HostID (HOST_ID, the engine's name): the host this manager's engine
	// is, in a fleet of hosts sharing one Redis (hosts.go). Managers of one
	// engine share it.
	HostID string
	// HostLabels (HOST_LABELS, "k=v,k=v"): what a spec's placement may ask
	// of this host.
	HostLabels map[string]string
	// HostTTL (HOST_TTL, 2 heartbeat intervals): a host whose managers
	// renewed it no longer for this long is lost, and its dead workers
	// are retired by another host's manager.
	HostTTL time.Duration
}

// ConfigFromEnv reads the configuration; errors name the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{RedisURL: getenv("REDIS_URL"), APIURL: getenv("API_URL"), ModelPrices: getenv(protocol.EnvModelPrices), BaseImage: getenv("WORKER_BASE_IMAGE"),
		NetworkMode: getenv("WORKER_NETWORK_MODE"), RedisURLForWorkers: getenv("WORKER_REDIS_URL"), ManagerID: getenv("MANAGER_ID")}
	fail := func(name string, err error) (Config, error) { return Config{}, fmt.Errorf("config: %s: %w", name, err) }
	var err error
	if c.RedisURL == "" {
		return fail("REDIS_URL", fmt.Errorf("required"))
	}
	if _, err := protocol.ParseRedisURL(c.RedisURL); err != nil {
		return fail("REDIS_URL", err) // the parser's errors never quote the URL
	}
	if c.Keys, err = protocol.NewKeys(getenv("WORKER_KEY_PREFIX")); err != nil {
		return fail("WORKER_KEY_PREFIX", err)
	}
	if c.MaxWorkers, err = intVar(getenv("MAX_CONCURRENT_WORKERS"), 10); err != nil || c.MaxWorkers < 1 {
		return fail("MAX_CONCURRENT_WORKERS", fmt.Errorf("want a positive whole number"))
	}
	if c.CreationTimeout, err = durVar(getenv("WORKER_CREATION_TIMEOUT"), 5*time.Minute); err != nil {
		return fail("WORKER_CREATION_TIMEOUT", err)
	}
	mem := getenv("WORKER_MEMORY_LIMIT")
	if mem == "" {
		mem = "512m"
	}
	if c.MemoryLimit, err = units.RAMInBytes(mem); err != nil || c.MemoryLimit < 6<<20 {
		return fail("WORKER_MEMORY_LIMIT", fmt.Errorf("want a size of at least 6m such as 512m, got %q", mem))
	}
	c.CPULimit = 0.5
	if v := getenv("WORKER_CPU_LIMIT"); v != "" {
		if c.CPULimit, err = strconv.ParseFloat(v, 64); err != nil || c.CPULimit <= 0 {
			return fail("WORKER_CPU_LIMIT", fmt.Errorf("want a positive number of cores such as 0.5, got %q", v))
		}
	}
	pids, err := intVar(getenv("WORKER_PIDS_LIMIT"), 512)
	if err != nil || pids < 16 {
		return fail("WORKER_PIDS_LIMIT", fmt.Errorf("want a whole number of at least 16"))
	}
	c.PidsLimit = int64(pids)
	if c.StopTimeout, err = durVar(getenv("WORKER_STOP_TIMEOUT"), 30*time.Second); err != nil || c.StopTimeout < 12*time.Second {
		return fail("WORKER_STOP_TIMEOUT", fmt.Errorf("want a duration of at least 12s"))
	}
	if c.NetworkMode == "" {
		c.NetworkMode = "host"
	}
	if c.RedisURLForWorkers == "" {
		c.RedisURLForWorkers = c.RedisURL
	}
	pass := getenv("WORKER_PASS_ENV")
	if pass == "" {
		pass = "ANTHROPIC_API_KEY,ANTHROPIC_BASE_URL,FACTORY_API_KEY,OPENAI_API_KEY,DROID_BASE_URL"
	}
	for _, n := range strings.Split(pass, ",") {
		if n = strings.TrimSpace(n); n != "" {
			c.PassEnv = append(c.PassEnv, n)
		}
	}
	if v := getenv("WORKER_ENV"); v != "" {
		if err := json.Unmarshal([]byte(v), &c.WorkerEnv); err != nil {
			return fail("WORKER_ENV", fmt.Errorf("want a JSON object of names and string values such as {\"AGENT_MODEL\":\"x\"}"))
		}
		for k := range c.WorkerEnv {
			if k == "WORKER_ID" || k == "REDIS_URL" || k == "WORKER_KEY_PREFIX" {
				return fail("WORKER_ENV", fmt.Errorf("%s is the manager's to set", k))
			}
			if k == protocol.EnvModelPrices {
				return fail("WORKER_ENV", fmt.Errorf("%s is a variable of the manager's own environment: it is checked at start and passed to every worker", k))
			}
		}
	}
	if _, err := protocol.ParseModelPrices(c.ModelPrices); err != nil {
		return fail(protocol.EnvModelPrices, err)
	}
	idle, err := intVar(getenv("IDLE_TIMEOUT_SECONDS"), 600)
	if err != nil || idle < 1 {
		return fail("IDLE_TIMEOUT_SECONDS", fmt.Errorf("want a positive whole number of seconds"))
	}
	c.IdleTimeout = time.Duration(idle) * time.Second
	if c.PauseTimeout, err = durVar(getenv("PAUSE_TIMEOUT"), 30*time.Minute); err != nil {
		return fail("PAUSE_TIMEOUT", err)
	}
	switch v := getenv("REPLACE_DEAD_WORKERS"); v {
	case "", "true", "1":
		c.ReplaceDead = true
	case "false", "0":
	default:
		return fail("REPLACE_DEAD_WORKERS", fmt.Errorf("want true or false, got %q", v))
	}
	if v := getenv("EVICT_PAUSED_AFTER"); v != "" {
		c.EvictPaused = true
		if v != "0" {
			if c.EvictPausedAfter, err = durVar(v, 0); err != nil {
				return fail("EVICT_PAUSED_AFTER", err)
			}
		}
	}
	if c.BaseImage == "" {
		c.BaseImage = DefaultBaseImage
	}
	vol := getenv("WORKER_PROJECT_VOLUMES")
	c.ProjectVolumes = vol == "" || vol == "true" || vol == "1"
	if c.VolumeRetention, err = durVar(getenv("VOLUME_RETENTION"), 30*24*time.Hour); err != nil {
		return fail("VOLUME_RETENTION", err)
	}
	c.PruneBuildCache = getenv("GC_PRUNE_BUILD_CACHE") == "true"
	if c.HeartbeatInterval, err = durVar(getenv("HEARTBEAT_INTERVAL"), 10*time.Second); err != nil {
		return fail("HEARTBEAT_INTERVAL", err)
	}
	if c.ReconcileInterval, err = durVar(getenv("RECONCILE_INTERVAL"), time.Minute); err != nil {
		return fail("RECONCILE_INTERVAL", err)
	}
	if c.CreationGrace, err = durVar(getenv("CREATION_GRACE"), 30*time.Second); err != nil {
		return fail("CREATION_GRACE", err)
	}
	switch c.WorkerACL = getenv("WORKER_REDIS_ACL"); c.WorkerACL {
	case "":
		c.WorkerACL = "auto"
	case "auto", "on", "off":
	default:
		return fail("WORKER_REDIS_ACL", fmt.Errorf("want auto, on or off, got %q", c.WorkerACL))
	}
	wu, err := protocol.ParseRedisURL(c.RedisURLForWorkers)
	if err != nil {
		return fail("WORKER_REDIS_URL", err)
	}
	c.RedisWait.Replicas, c.RedisWait.Timeout = getenv(protocol.EnvRedisWaitReplicas), getenv(protocol.EnvRedisWaitTimeout)
	if _, err := protocol.ParseWaitPolicy(c.RedisWait.Replicas, c.RedisWait.Timeout, wu); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if c.Pools, err = poolsFromEnv(getenv); err != nil {
		return fail("POOLS", err)
	}
	if c.LeaseTTL, err = durVar(getenv("LEASE_TTL"), protocol.DefaultLeaseTTLSeconds*time.Second); err != nil || c.LeaseTTL < 300*time.Millisecond {
		return fail("LEASE_TTL", fmt.Errorf("want a duration of at least 300ms such as 15s"))
	}
	if c.MaxReplacements, err = intVar(getenv("MAX_REPLACEMENTS"), 3); err != nil || c.MaxReplacements < 0 {
		return fail("MAX_REPLACEMENTS", fmt.Errorf("want a whole number of at least 0"))
	}
	if c.ReplaceBackoff, err = durVar(getenv("REPLACE_BACKOFF"), time.Second); err != nil {
		return fail("REPLACE_BACKOFF", err)
	}
	if c.Retention, err = durVar(getenv("RETENTION"), 24*time.Hour); err != nil {
		return fail("RETENTION", err)
	}
	maxlen, err := intVar(getenv(protocol.EnvStreamMaxLen), int(protocol.DefaultStreamMaxLen))
	if err != nil || maxlen < 100 {
		return fail(protocol.EnvStreamMaxLen, fmt.Errorf("want a whole number of at least 100"))
	}
	c.StreamMaxLen = int64(maxlen)
	if c.RunRetention, err = durVar(getenv(protocol.EnvRunRetention), protocol.DefaultRunRetention); err != nil {
		return fail(protocol.EnvRunRetention, err)
	}
	if c.ReplyTTL, err = durVar(getenv("REPLY_TTL"), time.Hour); err != nil {
		return fail("REPLY_TTL", err)
	}
	if c.HostID = getenv("HOST_ID"); c.HostID != "" && !protocol.ValidHostID(c.HostID) {
		return fail("HOST_ID", fmt.Errorf("want [A-Za-z0-9_.-]{1,64}, got %q", c.HostID))
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
	if c.HostLabels, err = protocol.ParseHostLabels(getenv("HOST_LABELS")); err != nil {
		return fail("HOST_LABELS", err)
	}
	if v := getenv("HOST_TTL"); v != "" {
		if c.HostTTL, err = durVar(v, 0); err != nil {
			return fail("HOST_TTL", err)
		}
	}
	return c, nil
}

func intVar(s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	return strconv.Atoi(s)
}

func durVar(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil && n > 0 {
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("want a positive duration such as 30s or 5m, got %q", s)
	}
	return d, nil
}
