package worker

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/envconf"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// Config is the wrapper's configuration, filled from the environment in
// one place (FromEnv) and validated at start. Each field's variable,
// default and parser are in configVars, the one table of them.
type Config struct {
	WorkerID string // WORKER_ID (required)
	Host     string // WORKER_HOST: the fleet host whose engine runs the worker (on its lifecycle events)
	// Project (WORKER_PROJECT_ID) is the project a long-lived worker is
	// bound to: it serves that project's tasks alone ("": any project).
	Project  string
	RedisURL string // REDIS_URL (required): redis://, rediss://, redis+sentinel:// or rediss+sentinel:// (protocol.ParseRedisURL)
	// RedisSocket (REDIS_SOCKET) and ModelSocket (MODEL_SOCKET): unix
	// sockets that reach REDIS_URL's server and the model API: a sealed
	// worker has no network, its gateway relays them.
	RedisSocket string
	ModelSocket string
	// ModelSocketToken (MODEL_SOCKET_TOKEN): the worker's token, which the
	// gateway wants on every request of MODEL_SOCKET; the agent never
	// gets it (secrets.go).
	ModelSocketToken string
	// EgressSocket (EGRESS_SOCKET): the gateway's egress proxy for the
	// agent; the wrapper's loopback front (package egress) is the agent's
	// HTTP_PROXY and HTTPS_PROXY.
	EgressSocket string
	// CredentialHosts (CREDENTIAL_HOSTS): the hosts the gateway holds a
	// credential for, for this worker. The agent's git reaches them at
	// http://host/ through the egress front (egress.GitInsteadOf), and
	// the gateway adds the credential: the agent never holds it.
	CredentialHosts []string
	// RedisWait is WAIT's policy for the writes that matter (a task's
	// output with its acknowledgement): REDIS_WAIT_REPLICAS (1 for a
	// sentinel URL, 0 otherwise) and REDIS_WAIT_TIMEOUT.
	RedisWait protocol.WaitPolicy
	Keys      protocol.Keys      // WORKER_KEY_PREFIX
	AgentType protocol.AgentType // AGENT_TYPE (required): claude, droid, codex, opencode, qwen or acp
	Kind      protocol.Kind      // WORKER_KIND: long_lived or developer

	AgentBin  string   // AGENT_BIN: the agent's executable (its CLI's name on PATH)
	AgentArgs []string // AGENT_ARGS: extra flags, a JSON array or words separated by spaces
	// AgentCommand is AGENT_COMMAND: the command line of an agent that
	// speaks ACP (AGENT_TYPE=acp).
	AgentCommand []string
	AgentModel   string // AGENT_MODEL: the model, as the agent's adapter passes it (claude --model, droid -m, ...)
	PTY          bool   // AGENT_PTY: run the agent on a pseudo-terminal
	// SkipPermissions (AGENT_SKIP_PERMISSIONS) matters only
	// with ALLOWED_COMMANDS=*: Claude --dangerously-skip-permissions and
	// Droid --skip-permissions-unsafe; false: Claude dontAsk with every
	// Bash command allowed, Droid --auto high (permissions.go).
	SkipPermissions bool
	// Persistent (AGENT_PERSISTENT) keeps one agent process
	// alive across the tasks of a long-lived worker (Claude's stream-json
	// input, Droid's JSON-RPC mode), so that a follow-up in the same
	// session needs no new process and no resume. The worker falls back
	// to a process per task when it dies. A Droid worker with MCP
	// servers runs a process per task (persistent.go).
	Persistent bool
	// Prewarm (AGENT_PREWARM; needs AGENT_PERSISTENT) starts
	// the persistent process for a new session when the worker starts,
	// before any task: the first task that wants a new session (no
	// project context to add) finds its agent up. The manager sets it for
	// warm pool workers.
	Prewarm bool
	// JSONSchema (AGENT_JSON_SCHEMA) hands Claude the stop
	// output schema (--json-schema) and takes its structured_output.
	JSONSchema bool

	Workspace string // WORKSPACE
	// DiskLimit (WORKER_DISK_LIMIT, bytes; 0: none) is the size the
	// manager gave the worker's disk: with one, a task that leaves the
	// disk full is reported (disk.go).
	DiskLimit       int64
	Instructions    string                   // INSTRUCTIONS: written to CLAUDE.md or AGENTS.md
	AllowedCommands protocol.AllowedCommands // ALLOWED_COMMANDS
	APIURL          string                   // API_URL, passed to the agent
	UserID          string                   // USER_ID, passed to the agent

	TaskTimeout  time.Duration // TASK_TIMEOUT
	StallTimeout time.Duration // STALL_TIMEOUT: no line from a live agent this long ends its task
	// Retry (RETRY_ATTEMPTS, RETRY_BACKOFF_MS) fills what a task's retry
	// policy leaves out; a task without one is never retried.
	Retry protocol.RetryPolicy
	// RecycleTasks and RecycleRSS recycle the persistent agent process
	// after that many tasks, or once its group's RSS passed that many
	// bytes (AGENT_RECYCLE_TASKS; AGENT_RECYCLE_RSS in MiB); 0 turns
	// either off.
	RecycleTasks int
	RecycleRSS   int64
	// Approval (AGENT_APPROVAL): the persistent Claude asks,
	// on its control channel, before each tool call ALLOWED_COMMANDS does
	// not allow; the task's owner answers within ApprovalTimeout
	// (APPROVAL_TIMEOUT), or it is denied. A Droid worker
	// ignores it (logged at start): its calls outside the list are
	// refused, as without it.
	Approval          bool
	ApprovalTimeout   time.Duration
	HeartbeatInterval time.Duration // HEARTBEAT_INTERVAL
	// DegradedCooldown (DEGRADED_COOLDOWN) is how long a degraded worker
	// waits before its health check (doubled for each degradation in a
	// row).
	DegradedCooldown time.Duration
	ShutdownGrace    time.Duration // SHUTDOWN_GRACE: time a running task gets after SIGTERM
	ResultGrace      time.Duration // RESULT_GRACE
	KillGrace        time.Duration // KILL_GRACE: SIGTERM to SIGKILL
	ProgressAddr     string        // PROGRESS_ADDR
	EventBuffer      int           // EVENT_BUFFER: events kept while Redis is down
	PauseAfterOutput bool          // PAUSE_AFTER_OUTPUT: ask the spawner to pause after each output

	// StreamMaxLen (STREAM_MAXLEN) is the approximate MAXLEN of every
	// XADD the wrapper makes; 0 turns trimming off.
	StreamMaxLen int64
	// RunRetention (RUN_RETENTION) is how long a run hash lives after its
	// terminal state.
	RunRetention time.Duration

	// SessionPolicy (SESSION_POLICY) is "project" (continue the project's
	// session while it is small and recent) or "new" (a new session for
	// every task).
	SessionPolicy string
	// Sessions tunes the project policy: SESSION_CONTEXT_THRESHOLD,
	// SESSION_STALE_AFTER, SESSION_AFFINITY, SESSION_SUMMARIZE.
	Sessions SessionConfig
	// SessionStore (SESSION_STORE): "redis" saves each session's files to
	// Redis after each task and restores them before a resume when they
	// are not here; "off" keeps them in the agent's home only.
	// SessionStoreMax (SESSION_STORE_MAX_BYTES) caps one session's
	// compressed files; a larger one is not stored.
	SessionStore    string
	SessionStoreMax int

	// DroidBaseURL (DROID_BASE_URL) points Droid at an Anthropic-compatible
	// API through a custom model in ~/.factory/settings.json.
	DroidBaseURL string
	// MCPServers (AGENT_MCP_SERVERS, set by the spawner from the spec) are
	// the agent's MCP servers, and MCPTimeout (AGENT_MCP_TIMEOUT) how long a server may take to start (mcp.go).
	MCPServers []protocol.MCPServer
	MCPTimeout time.Duration
	// GitDefault (WORKER_GIT, set by the spawner from the spec's git) is
	// the repository of the tasks that name none (gitwork.go).
	GitDefault *protocol.Git
	// Prices (MODEL_PRICES, a JSON object put over
	// protocol.DefaultModelPrices) price the model calls of an agent that
	// reports no cost of its own (cost.go).
	Prices protocol.ModelPrices
	// SelfPath is the wrapper's own executable, put on the agent's PATH so
	// that `worker-wrapper progress` works from its shell tool.
	SelfPath string

	model  modelAPI // the model API proxy, as the agent sees it (secrets.go)
	egress []string // the agent's proxy variables for the egress front, if any
}

// setCredentialHosts reads CREDENTIAL_HOSTS: host names or IP literals.
func (c *Config) setCredentialHosts(s string) error {
	var hosts []string
	for _, h := range envconf.ParseList(s) {
		if n, ok := protocol.NormalizeHostName(h); ok {
			hosts = append(hosts, n)
			continue
		}
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("%q: want a host name or an IP literal", h)
		}
		if a.Is6() && !a.Is4In6() {
			hosts = append(hosts, "["+a.String()+"]")
		} else {
			hosts = append(hosts, a.Unmap().String())
		}
	}
	c.CredentialHosts = hosts
	return nil
}

// FromEnv reads the configuration from getenv (os.Getenv in production).
// Every error names the variable.
func FromEnv(getenv func(string) string) (Config, error) {
	var c Config
	var redisURL protocol.RedisURL
	var wait struct{ replicas, timeout string }
	if err := envconf.Load(getenv, configVars(&c, &redisURL, &wait.replicas, &wait.timeout)); err != nil {
		return Config{}, err
	}
	var err error
	if c.RedisWait, err = protocol.ParseWaitPolicy(wait.replicas, wait.timeout, redisURL); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if c.AgentBin == "" {
		c.AgentBin = string(c.AgentType)
	}
	if err := c.checkAgentModes(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// agentCaps is what the configured agent can do (its adapter's Caps), and
// its name; no capability for an agent type without an adapter, which the
// table refused.
func (c *Config) agentCaps() (agent.Capabilities, string) {
	ad, err := agent.New(c.AgentType, c.agentSettings())
	if err != nil {
		return agent.Capabilities{}, string(c.AgentType)
	}
	return ad.Caps(), ad.Name()
}

// checkAgentModes checks the rules across the agent's variables.
func (c *Config) checkAgentModes() error {
	caps, name := c.agentCaps()
	switch {
	case c.Prewarm && !c.Persistent:
		return envconf.Errorf("AGENT_PREWARM", "needs AGENT_PERSISTENT=true")
	case c.JSONSchema && !caps.JSONSchema:
		return envconf.Errorf("AGENT_JSON_SCHEMA", "only Claude takes a JSON schema")
	case c.Persistent && caps.NoPersistent != "":
		return envconf.Errorf("AGENT_PERSISTENT", "not for this agent: %s", caps.NoPersistent)
	case c.Persistent && (c.Kind != protocol.KindLongLived || c.PTY):
		return envconf.Errorf("AGENT_PERSISTENT", "only for a long-lived worker without a pty")
	case c.AgentType == protocol.AgentACP && len(c.AgentCommand) == 0:
		return envconf.Errorf("AGENT_COMMAND", "required with AGENT_TYPE=acp: the command that speaks ACP")
	case c.AgentType != protocol.AgentACP && len(c.AgentCommand) > 0:
		return envconf.Errorf("AGENT_COMMAND", "only with AGENT_TYPE=acp (AGENT_BIN names the other agents' executables)")
	case c.PTY && caps.Converses:
		return envconf.Errorf("AGENT_PTY", "not for an ACP agent: its stdio carries the protocol")
	case c.Approval && !c.Persistent && caps.Approvals && !caps.Converses:
		return envconf.Errorf("AGENT_APPROVAL", "needs AGENT_PERSISTENT=true: %s asks on the persistent process's control channel", name)
	}
	return nil
}

// configVars is the wrapper's table of variables: each one's name,
// default, parser, documentation (Markdown, the Meaning of its row in
// docs/configuration.md, which TestConfigTables generates from it) and
// the field of c it fills. The Redis URL and WAIT's two variables go to
// u, replicas and timeout, which FromEnv makes into c.RedisWait.
func configVars(c *Config, u *protocol.RedisURL, replicas, timeout *string) []envconf.Var {
	return slices.Concat(identityVars(c, u, replicas, timeout), agentVars(c), runVars(c), elsewhereVars)
}

// identityVars: who the worker is and where its Redis is.
func identityVars(c *Config, u *protocol.RedisURL, replicas, timeout *string) []envconf.Var {
	return []envconf.Var{
		{Name: "WORKER_ID", Required: true, Value: envconf.Func(c.setWorkerID), Doc: "the worker's id (no white space, braces or colons)"},
		{Name: protocol.EnvWorkerHost, Value: envconf.String(&c.Host), Doc: "the fleet host whose engine runs the worker (set by the manager; on its lifecycle events)"},
		{Name: protocol.EnvWorkerProject, Value: envconf.Func(c.setProject), Doc: "the project a long-lived worker is bound to (set by the manager from its spec's `project_id`): a task of another project is refused `INVALID_TASK`, one that names none runs in it, and the worker's Redis user reaches that project's keys only ([SECURITY.md](../SECURITY.md))"},
		{Name: "REDIS_URL", Required: true, Value: envconf.Func(func(s string) (err error) { c.RedisURL = s; *u, err = protocol.ParseRedisURL(s); return err }),
			Doc: "`redis://[[user]:password@]host:port/db`, `rediss://...`, or Redis Sentinel `redis+sentinel://[[user]:password@]host:port,.../master/db[?sentinel_password=...]` ([PROTOCOL.md](../protocol/PROTOCOL.md#redis-url)); a login Redis refuses (`WRONGPASS`: a promoted replica without this worker's user yet) is retried"},
		{Name: "REDIS_SOCKET", Value: envconf.String(&c.RedisSocket), Doc: "a unix socket every Redis connection goes through: a sealed worker's gateway relays it to `REDIS_URL`'s server (set by the manager)"},
		{Name: "MODEL_SOCKET", Value: envconf.String(&c.ModelSocket), Doc: "a unix socket every model API call of the wrapper's proxy goes through: it takes plain HTTP with `MODEL_SOCKET_TOKEN`, and a sealed worker's gateway forwards it to the model API over HTTPS (set by the manager)"},
		{Name: "MODEL_SOCKET_TOKEN", Value: envconf.String(&c.ModelSocketToken), Doc: "the worker's token, sent in `X-Agentvisor-Worker-Token` on every request of `MODEL_SOCKET`: the gateway refuses (403) a request without it, so the agent, which can connect to the socket too, reaches no model API through it; the manager makes it at create, the agent never gets it"},
		{Name: "EGRESS_SOCKET", Value: envconf.String(&c.EgressSocket), Doc: "the gateway's egress proxy, which the wrapper's loopback front hands the agent's `HTTP_PROXY`/`HTTPS_PROXY` connections to: the gateway allows the worker's allowlist only, and a refusal is a `warning` with `refused.tool` `network` (a sealed worker; set by the manager)"},
		{Name: "CREDENTIAL_HOSTS", Value: envconf.Func(c.setCredentialHosts),
			Doc: "comma-separated hosts the gateway adds a credential to (a sealed worker; set by the manager from the gateway's `credential_hosts`): the agent's git is pointed at `http://host/` for `https://host/` (`GIT_CONFIG_COUNT`/`KEY`/`VALUE`), through the egress proxy, and the gateway adds the credential and speaks HTTPS upstream; the agent never holds it ([gateway/README.md](../gateway/README.md#credentials))"},
		{Name: protocol.EnvRedisWaitReplicas, DefaultDoc: "`1` for a sentinel URL, else `0`", Value: envconf.String(replicas),
			Doc: "`WAIT` for this many replicas after a task's output is stored with its acknowledgement, before its input is acknowledged for good; a short answer makes the idempotent store once more (the primary may have changed), then goes on"},
		{Name: protocol.EnvRedisWaitTimeout, DefaultDoc: "`" + envconf.FormatDuration(protocol.DefaultRedisWaitTimeout) + "`", Value: envconf.String(timeout),
			Doc: "how long one such `WAIT` may take"},
		{Name: "WORKER_KEY_PREFIX", Default: protocol.DefaultPrefix, Value: envconf.Func(func(s string) (err error) { c.Keys, err = protocol.NewKeys(s); return err }),
			Doc: "first segment of every Redis name"},
		{Name: "WORKER_KIND", Default: string(protocol.KindLongLived), Value: envconf.Func(func(s string) (err error) { c.Kind, err = protocol.ParseKind(s); return err }),
			Doc: "`long_lived` (reads `worker:{id}:input`) or `developer` (reads the shared developer queues `worker:developer:input[:high|:low]` through the `developers` group)"},
	}
}

// agentVars: the agent CLI and how it runs.
func agentVars(c *Config) []envconf.Var {
	return []envconf.Var{
		{Name: "AGENT_TYPE", Required: true, Value: envconf.Func(func(s string) (err error) { c.AgentType, err = protocol.ParseAgentType(s); return err }),
			Doc: "`claude`, `droid`, `codex`, `opencode`, `qwen` ([Qwen Code](../wrapper/README.md#qwen-code)) or `acp` (any agent that speaks ACP, run as `AGENT_COMMAND`); `CLAUDE`, `FACTORY` and `qwen-code` are accepted too"},
		{Name: "AGENT_BIN", DefaultDoc: "`claude` / `droid` / `codex` / `opencode` / `qwen` on `PATH`", Value: envconf.String(&c.AgentBin), Doc: "the agent's executable"},
		{Name: "AGENT_COMMAND", Value: envconf.Func(func(s string) (err error) { c.AgentCommand, err = parseArgs(s); return err }),
			Doc: "with `AGENT_TYPE=acp` (required then): the command that speaks ACP on its stdio, a JSON array or words separated by spaces ([ACP agents and OpenCode](../wrapper/README.md#acp-agents-and-opencode))"},
		{Name: "AGENT_ARGS", Value: envconf.Func(func(s string) (err error) { c.AgentArgs, err = parseArgs(s); return err }),
			Doc: "extra flags: a JSON array, or words separated by spaces"},
		{Name: "AGENT_MODEL", Value: envconf.String(&c.AgentModel), Doc: "`--model` (Claude; Qwen Code, default its own), `-m` (Droid, Codex), or OpenCode's configured model (default `claude-sonnet-4-5`)"},
		{Name: "AGENT_PTY", Default: "false", Value: envconf.Bool(&c.PTY), Doc: "run the agent on a pseudo-terminal (escape sequences and CRs are cleaned before parsing)"},
		{Name: "AGENT_SKIP_PERMISSIONS", Default: "true", Value: envconf.Bool(&c.SkipPermissions), Doc: "with `ALLOWED_COMMANDS=*` only: the agents' skip-permissions flags ([ALLOWED_COMMANDS](../wrapper/README.md#allowed_commands-what-the-agent-may-run)); `false`: Claude `--permission-mode dontAsk` with `Bash` allowed, Droid `--auto high`"},
		{Name: "AGENT_JSON_SCHEMA", Default: "false", Value: envconf.Bool(&c.JSONSchema), Doc: "give Claude the stop output schema (`--json-schema`) and take its `structured_output`"},
		{Name: "AGENT_PERSISTENT", Default: "false", Value: envconf.Bool(&c.Persistent), Doc: "keep one agent process alive across the tasks of a long-lived worker: Claude with `--input-format stream-json`, Droid in its JSON-RPC mode ([A persistent Droid](../wrapper/README.md#a-persistent-droid)), Codex as `codex app-server` ([The persistent Codex](../wrapper/README.md#the-persistent-codex-codex-app-server)), an ACP agent's session (OpenCode, Qwen Code, `acp`: [ACP agents](../wrapper/README.md#acp-agents-and-opencode)). A follow-up in the same session needs no new process and no resume; a process serves one session (a task of another starts another). A process that dies is replaced (resuming the session); after two deaths the worker runs one process per task. A Droid worker with MCP servers runs one process per task"},
		{Name: "AGENT_PREWARM", Default: "false", Value: envconf.Bool(&c.Prewarm), Doc: "with `AGENT_PERSISTENT`: start the agent process before any task, for a new session, and wait until it is ready (Claude's answer to the `initialize` control request; Droid's new session open; Codex's new thread open) before the worker says it is idle (the manager sets it for warm pool workers, which the pool pauses then, ready). The first task that wants a new session with no project context runs in it (Claude: a 184 ms first task against 1965 ms cold in `make bench`); any other starts its own process. No model call is made ahead"},
		{Name: "AGENT_APPROVAL", Default: "false", Value: envconf.Bool(&c.Approval), Doc: "with `AGENT_PERSISTENT` (Claude; Codex: its app-server's approval requests), or any mode (OpenCode, Qwen Code, `acp`: its `session/request_permission`): a tool call outside `ALLOWED_COMMANDS` is asked of the task's owner (`permission_request` on the output, `permission_reply` on the input) instead of refused; unanswered, it is denied after `APPROVAL_TIMEOUT`. A Droid worker ignores it (logged at start)"},
		{Name: "APPROVAL_TIMEOUT", Default: "5m", Value: envconf.Duration(&c.ApprovalTimeout), Doc: "an unanswered permission request (`AGENT_APPROVAL`) is denied after this"},
		{Name: "AGENT_RECYCLE_TASKS", Default: "100", Value: envconf.Int(&c.RecycleTasks, 0), Doc: "the persistent agent process is ended after this many tasks; the next task starts another, resuming the session (`0`: never)"},
		{Name: "AGENT_RECYCLE_RSS", Default: "1024", Value: envconf.IntOf(&c.RecycleRSS, 0, 1<<20), Doc: "MiB: the persistent agent process is ended after a task once its process group's resident memory (RSS) passed this; the next task starts another (`0`: never)"},
		{Name: "WORKSPACE", Default: "/workspace", Value: envconf.String(&c.Workspace), Doc: "the agent's working directory, created if missing"},
		{Name: protocol.EnvDiskLimit, Default: "0", Value: envconf.Int(&c.DiskLimit, 0), Doc: "bytes: the worker's disk limit (`limits.disk`, set by the manager); with one, a task that leaves the filesystem of the workspace or the home with less than 1 MiB free publishes a `DISK_FULL` warning and its output's `disk` says so; `0`: none"},
		{Name: "INSTRUCTIONS", Value: envconf.String(&c.Instructions), Doc: "written to `CLAUDE.md` (Claude) or `AGENTS.md` (Droid, Codex, the ACP agents) in the workspace at start; a spec's are at most 64 KiB (`protocol.MaxInstructionsBytes`)"},
		{Name: "ALLOWED_COMMANDS", DefaultDoc: "(none: no shell command but the progress call)", ParseEmpty: true,
			Value: envconf.Func(func(s string) (err error) { c.AllowedCommands, err = protocol.ParseAllowedCommandsEnv(s); return err }),
			Doc:   "a JSON array or comma-separated patterns of the shell commands the agent may run (`engineering.deploy` is `engineering deploy ...`), enforced by the agent CLIs; progress calls are always allowed ([ALLOWED_COMMANDS](../wrapper/README.md#allowed_commands-what-the-agent-may-run))"},
		{Name: "API_URL", Value: envconf.String(&c.APIURL), Doc: "passed to the agent's environment"},
		{Name: "USER_ID", Value: envconf.String(&c.UserID), Doc: "passed to the agent's environment"},
		{Name: "DROID_BASE_URL", Value: envconf.String(&c.DroidBaseURL), Doc: "point Droid at an Anthropic-compatible API through a custom model in `~/.factory/settings.json`, whose model id is `AGENT_MODEL` (our own name `agentvisor` when unset, for the stub); the proxy forwards to it, and the settings name the proxy"},
		{Name: protocol.EnvMCPServers, Value: envconf.Func(func(s string) (err error) { c.MCPServers, err = protocol.ParseMCPServersEnv(s); return err }),
			Doc: "the spec's MCP servers, a JSON array ([MCP servers](../wrapper/README.md#mcp-servers)); set by the manager"},
		{Name: protocol.EnvGitDefault, Value: envconf.Func(func(s string) (err error) { c.GitDefault, err = protocol.DecodeGitDefault(s); return err }),
			Doc: "the spec's `git`, a JSON object: the repository, base and branch of every task that names none ([Git](../protocol/PROTOCOL.md#git)); set by the manager"},
		{Name: envMCPTimeout, Default: "30", Value: envconf.Duration(&c.MCPTimeout), Doc: "how long an MCP server may take to start or connect before the task fails with `MCP_UNAVAILABLE` (Claude)"},
		{Name: protocol.EnvModelPrices, DefaultDoc: "built-in defaults (Anthropic models)", ParseEmpty: true,
			Value: envconf.Func(func(s string) (err error) { c.Prices, err = protocol.ParseModelPrices(s); return err }),
			Doc:   "set by the manager from its own: the price table of an agent that reports no cost (Droid), which the wrapper estimates a task's cost with from the usage its proxy meters (a task's `max_budget_usd` stops the Droid once passed): a JSON object `{\"<model id>\": {\"input\": 3, \"output\": 15, \"cache_read\": 0.3, \"cache_write\": 3.75}}`, US dollars per million tokens, every field required, put over the defaults ([PROTOCOL.md](../protocol/PROTOCOL.md#budgets))"},
	}
}

// runVars: timings, buffers, retention and sessions.
func runVars(c *Config) []envconf.Var {
	return []envconf.Var{
		{Name: "TASK_TIMEOUT", Default: "600", Value: envconf.Duration(&c.TaskTimeout), Doc: "per-task timeout (seconds, or `10m`); a task's `timeout_seconds` overrides it"},
		{Name: "STALL_TIMEOUT", Default: "5m", Value: envconf.Duration(&c.StallTimeout), Doc: "a live agent that prints no line this long (its model call parked for a rate limit excepted) is stopped: failed `AGENT_STALLED`, retryable. A tool that runs quietly longer than this (a long build) needs a longer value"},
		{Name: protocol.EnvRetryAttempts, Default: strconv.Itoa(protocol.DefaultRetryAttempts), Value: envconf.Func(func(s string) (err error) { c.Retry.Attempts, err = protocol.ParseRetryAttempts(s); return err }),
			Doc: "attempts in all (the first included) of a task that asks for retries (`retry`) without saying how many (set by the manager; [Retries](../protocol/PROTOCOL.md#retries))"},
		{Name: protocol.EnvRetryBackoffMS, Default: protocol.FormatRetryBackoffMS(protocol.DefaultRetryBackoffMS),
			Value: envconf.Func(func(s string) (err error) { c.Retry.BackoffMS, err = protocol.ParseRetryBackoffMS(s); return err }),
			Doc:   "ms before the 2nd, 3rd, ... attempt (the last value repeats) of a task whose `retry` gives no `backoff_ms` (set by the manager)"},
		{Name: "HEARTBEAT_INTERVAL", Default: "10", Value: envconf.Duration(&c.HeartbeatInterval), Doc: "the heartbeat's period, in seconds (or a duration); the heartbeat key lives three periods"},
		{Name: "DEGRADED_COOLDOWN", Default: "60", Value: envconf.Duration(&c.DegradedCooldown), Doc: "how long a degraded worker (three worker-side task failures in a row) waits before its health check, a heartbeat round trip; doubled for each degradation in a row, up to 960 s (16 minutes; a longer cool-down is not doubled)"},
		{Name: "SHUTDOWN_GRACE", Default: "20", Value: envconf.Duration(&c.ShutdownGrace), Doc: "time a running task gets after SIGTERM; keep it below the container's stop timeout"},
		{Name: "RESULT_GRACE", Default: "3", Value: envconf.Duration(&c.ResultGrace), Doc: "time the agent may take to exit after its result line"},
		{Name: "KILL_GRACE", Default: "5", Value: envconf.Duration(&c.KillGrace), Doc: "SIGTERM to SIGKILL"},
		{Name: "PROGRESS_ADDR", Default: "127.0.0.1:0", Value: envconf.String(&c.ProgressAddr), Doc: "address of the progress and health endpoint"},
		{Name: "EVENT_BUFFER", Default: "1000", Value: envconf.Int(&c.EventBuffer, 1), Doc: "events kept while Redis is unreachable (the oldest is dropped beyond)"},
		{Name: "PAUSE_AFTER_OUTPUT", Default: "true", Value: envconf.Bool(&c.PauseAfterOutput), Doc: "ask the manager to pause the worker after each output, and after a task it answered before (a duplicate wakes it too)"},
		{Name: protocol.EnvStreamMaxLen, Default: strconv.FormatInt(protocol.DefaultStreamMaxLen, 10), Value: envconf.Int(&c.StreamMaxLen, 0),
			Doc: "approximate MAXLEN of every XADD the wrapper makes (output, lifecycle, control); `0`: no trimming ([Retention](../protocol/PROTOCOL.md#retention))"},
		{Name: protocol.EnvRunRetention, Default: envconf.FormatDuration(protocol.DefaultRunRetention), Value: envconf.Duration(&c.RunRetention),
			Doc: "a run hash expires this long after its terminal state"},
		{Name: "SESSION_POLICY", Default: "project", Value: envconf.Enum(&c.SessionPolicy, "project", "new"), Doc: "`project`: continue the project's session while it is small and recent ([PROTOCOL.md](../protocol/PROTOCOL.md#sessions-and-usage)); `new`: a new session for every task"},
		{Name: "SESSION_CONTEXT_THRESHOLD", Default: "150000", Value: envconf.Int(&c.Sessions.ContextThreshold, 1), Doc: "context tokens (of a 200 000 window; scaled to the model's window when the agent reports it) at which a session is retired"},
		{Name: "SESSION_STALE_AFTER", Default: "24h", Value: envconf.Duration(&c.Sessions.StaleAfter), Doc: "a session idle this long is retired"},
		{Name: "SESSION_AFFINITY", Default: "30m", Value: envconf.Duration(&c.Sessions.Affinity), Doc: "how long a project's session stays bound to this worker after its last task"},
		{Name: "SESSION_SUMMARIZE", Default: "true", Value: envconf.Bool(&c.Sessions.Summarize), Doc: "ask a retiring session for a summary of the project, injected into the next session (in the persistent agent when there is one; its usage and cost go to the project's, the worker's and the old session's usage counters, `TestClaudeProjectSessions`, `TestPersistentSummaryTurn`)"},
		{Name: "SESSION_STORE", Default: "redis", Value: envconf.Enum(&c.SessionStore, "redis", "off"), Doc: "`redis`: after each task the session's files (those under `~/.claude/projects` and `~/.factory/sessions` named by the session id) are saved, gzip-compressed, to `worker:session:{agent}:{project}:files` for `SESSION_STALE_AFTER`; before a resume in a container that lacks them they are restored from there ([PROTOCOL.md](../protocol/PROTOCOL.md#session-store)); `off`: they stay in the agent's home"},
		{Name: "SESSION_STORE_MAX_BYTES", Default: "8388608", Value: envconf.Int(&c.SessionStoreMax, 1), Doc: "a session whose files are larger compressed is not stored (logged; a resume elsewhere then falls back to a new session with the project's context)"},
	}
}

// elsewhereVars are read by their users, not into Config: the model
// credentials by the model proxy (secrets.go), which keeps them out of
// Config, and LOG_LEVEL by main before anything else.
var elsewhereVars = []envconf.Var{
	{Name: "ANTHROPIC_API_KEY", Doc: "the model API key: held by the wrapper's loopback proxy only, which sends it upstream as `x-api-key`; the agent gets the proxy's URL and a per-worker token ([Secrets in a worker](../spawner/INTERNALS.md#secrets-in-a-worker))"},
	{Name: "ANTHROPIC_AUTH_TOKEN", Doc: "used instead of `ANTHROPIC_API_KEY` when that is unset: held by the proxy alike, sent upstream as `Authorization: Bearer`"},
	{Name: "ANTHROPIC_BASE_URL", DefaultDoc: "`https://api.anthropic.com`", Doc: "where the proxy forwards Claude's calls (the agent's own `ANTHROPIC_BASE_URL` is the proxy)"},
	{Name: "OPENAI_API_KEY", Doc: "Codex's model API key (the OpenAI Responses API): held by the wrapper's proxy only, which sends it upstream as `Authorization: Bearer`"},
	{Name: "OPENAI_BASE_URL", DefaultDoc: "`https://api.openai.com`", Doc: "where the proxy forwards Codex's calls; a trailing `/v1` is dropped (Codex's paths carry it)"},
	{Name: "FACTORY_API_KEY", Doc: "Droid's own login to Factory's service; passed to Droid only when `DROID_BASE_URL` is unset"},
	{Name: "LOG_LEVEL", DefaultDoc: "`info`", Doc: "`debug` for more; logs are JSON lines on stderr, through a queue of 4096 lines that drops (and counts, in a line with `\"dropped\"`) rather than block the wrapper when nobody reads the container's log (the engine restarting)"},
}

func (c *Config) setProject(s string) error {
	if err := protocol.CheckID("WORKER_PROJECT_ID", s); err != nil {
		return err
	}
	c.Project = s
	return nil
}

func (c *Config) setWorkerID(s string) error {
	if err := checkID(s); err != nil {
		return err
	}
	c.WorkerID = s
	return nil
}

// ResolveAgent finds the agent's executable. It returns an error whose
// exit code (127 missing, 126 not executable) the wrapper exits with.
func (c *Config) ResolveAgent() error {
	p, err := exec.LookPath(c.AgentBin)
	if err != nil {
		if fi, statErr := os.Stat(c.AgentBin); statErr == nil && !fi.IsDir() {
			return &ExitError{Code: 126, Err: fmt.Errorf("config: AGENT_BIN %s is not executable", c.AgentBin)}
		}
		return &ExitError{Code: 127, Err: fmt.Errorf("config: AGENT_BIN %s: not found", c.AgentBin)}
	}
	c.AgentBin = p
	return nil
}

// ExitError carries the exit code the wrapper ends with.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

func checkID(id string) error {
	if len(id) > protocol.MaxIDLen || strings.ContainsAny(id, " \t\r\n{}:") {
		return fmt.Errorf("%q: at most %d bytes, no white space, braces or colons", id, protocol.MaxIDLen)
	}
	return nil
}

func parseArgs(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "[") {
		var out []string
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("not a JSON array of strings: %w", err)
		}
		return out, nil
	}
	return strings.Fields(s), nil
}

// envMCPTimeout is how long an MCP server may take to start (Claude's own
// default, 30 s).
const envMCPTimeout = "AGENT_MCP_TIMEOUT"

// sessionFiles is the session store of the worker's configuration (nil:
// SESSION_STORE=off). Sessions are kept as long as a session may be
// continued (SESSION_STALE_AFTER).
func (c Config) sessionFiles(store SessionBlobs, log *slog.Logger) *SessionFiles {
	dirs := agentSessionDirs[c.AgentType]
	if c.SessionStore == "off" || len(dirs) == 0 {
		return nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil
	}
	return &SessionFiles{Home: home, Dirs: dirs, Store: store, MaxBytes: c.SessionStoreMax,
		TTL: c.Sessions.withDefaults().StaleAfter, Log: log}
}
