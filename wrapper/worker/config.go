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

	Workspace       string                   // WORKSPACE
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
// default, parser, documentation and the field of c it fills. The Redis
// URL and WAIT's two variables go to u, replicas and timeout, which
// FromEnv makes into c.RedisWait. The READMEs' tables are checked against
// it (TestConfigTables).
func configVars(c *Config, u *protocol.RedisURL, replicas, timeout *string) []envconf.Var {
	return slices.Concat(identityVars(c, u, replicas, timeout), agentVars(c), runVars(c), elsewhereVars)
}

// identityVars: who the worker is and where its Redis is.
func identityVars(c *Config, u *protocol.RedisURL, replicas, timeout *string) []envconf.Var {
	return []envconf.Var{
		{Name: "WORKER_ID", Required: true, Value: envconf.Func(c.setWorkerID), Doc: "the worker's id"},
		{Name: protocol.EnvWorkerHost, Value: envconf.String(&c.Host), Doc: "the fleet host whose engine runs the worker (set by the manager)"},
		{Name: "REDIS_URL", Required: true, Value: envconf.Func(func(s string) (err error) { c.RedisURL = s; *u, err = protocol.ParseRedisURL(s); return err }),
			Doc: "redis://, rediss://, redis+sentinel:// or rediss+sentinel://"},
		{Name: "REDIS_SOCKET", Value: envconf.String(&c.RedisSocket), Doc: "a unix socket every Redis connection goes through (a sealed worker's gateway; set by the manager)"},
		{Name: "MODEL_SOCKET", Value: envconf.String(&c.ModelSocket), Doc: "a unix socket every request of the model API proxy goes through, plain HTTP (a sealed worker's gateway, which speaks HTTPS to the model API; set by the manager)"},
		{Name: "MODEL_SOCKET_TOKEN", Value: envconf.String(&c.ModelSocketToken), Doc: "the worker's token, sent on every request of MODEL_SOCKET: the gateway refuses a request without it (set by the manager; never the agent's)"},
		{Name: "EGRESS_SOCKET", Value: envconf.String(&c.EgressSocket), Doc: "the gateway's egress proxy for the agent, which allows the worker's allowlist only (a sealed worker; set by the manager)"},
		{Name: "CREDENTIAL_HOSTS", Value: envconf.Func(c.setCredentialHosts),
			Doc: "comma-separated hosts the gateway adds a credential to (a sealed worker; set by the manager from the gateway's credential_hosts): the agent's git reaches them as http://host/ through the egress proxy"},
		{Name: protocol.EnvRedisWaitReplicas, DefaultDoc: "`1` for a sentinel URL, else `0`", Value: envconf.String(replicas),
			Doc: "WAIT for this many replicas after storing a task's output"},
		{Name: protocol.EnvRedisWaitTimeout, DefaultDoc: "`" + envconf.FormatDuration(protocol.DefaultRedisWaitTimeout) + "`", Value: envconf.String(timeout),
			Doc: "how long one such WAIT may take"},
		{Name: "WORKER_KEY_PREFIX", Default: protocol.DefaultPrefix, Value: envconf.Func(func(s string) (err error) { c.Keys, err = protocol.NewKeys(s); return err }),
			Doc: "first segment of every Redis name"},
		{Name: "WORKER_KIND", Default: string(protocol.KindLongLived), Value: envconf.Func(func(s string) (err error) { c.Kind, err = protocol.ParseKind(s); return err }),
			Doc: "long_lived (its own input) or developer (the shared developer input)"},
	}
}

// agentVars: the agent CLI and how it runs.
func agentVars(c *Config) []envconf.Var {
	return []envconf.Var{
		{Name: "AGENT_TYPE", Required: true, Value: envconf.Func(func(s string) (err error) { c.AgentType, err = protocol.ParseAgentType(s); return err }),
			Doc: "claude, droid, codex, opencode, qwen or acp (any agent that speaks ACP, given AGENT_COMMAND)"},
		{Name: "AGENT_BIN", DefaultDoc: "`claude` / `droid` / `codex` / `opencode` / `qwen` on `PATH`", Value: envconf.String(&c.AgentBin), Doc: "the agent's executable"},
		{Name: "AGENT_COMMAND", Value: envconf.Func(func(s string) (err error) { c.AgentCommand, err = parseArgs(s); return err }),
			Doc: "with AGENT_TYPE=acp (required then): the command that speaks ACP on its stdio, a JSON array or words separated by spaces"},
		{Name: "AGENT_ARGS", Value: envconf.Func(func(s string) (err error) { c.AgentArgs, err = parseArgs(s); return err }),
			Doc: "extra flags: a JSON array, or words separated by spaces"},
		{Name: "AGENT_MODEL", Value: envconf.String(&c.AgentModel), Doc: "--model (Claude, Qwen Code), -m (Droid, Codex), or OpenCode's configured model"},
		{Name: "AGENT_PTY", Default: "false", Value: envconf.Bool(&c.PTY), Doc: "run the agent on a pseudo-terminal"},
		{Name: "AGENT_SKIP_PERMISSIONS", Default: "true", Value: envconf.Bool(&c.SkipPermissions), Doc: "with ALLOWED_COMMANDS=* only: the agents' skip-permissions flags"},
		{Name: "AGENT_JSON_SCHEMA", Default: "false", Value: envconf.Bool(&c.JSONSchema), Doc: "give Claude the stop output schema"},
		{Name: "AGENT_PERSISTENT", Default: "false", Value: envconf.Bool(&c.Persistent), Doc: "one agent process across a long-lived worker's tasks"},
		{Name: "AGENT_PREWARM", Default: "false", Value: envconf.Bool(&c.Prewarm), Doc: "with AGENT_PERSISTENT: start that process before the first task"},
		{Name: "AGENT_APPROVAL", Default: "false", Value: envconf.Bool(&c.Approval), Doc: "ask the task's owner about a tool call ALLOWED_COMMANDS does not allow"},
		{Name: "APPROVAL_TIMEOUT", Default: "5m", Value: envconf.Duration(&c.ApprovalTimeout), Doc: "an unanswered permission request is denied after it"},
		{Name: "AGENT_RECYCLE_TASKS", Default: "100", Value: envconf.Int(&c.RecycleTasks, 0), Doc: "the persistent process is replaced after this many tasks (0: never)"},
		{Name: "AGENT_RECYCLE_RSS", Default: "1024", Value: envconf.IntOf(&c.RecycleRSS, 0, 1<<20), Doc: "MiB: the persistent process is replaced once its RSS passed this (0: never)"},
		{Name: "WORKSPACE", Default: "/workspace", Value: envconf.String(&c.Workspace), Doc: "the agent's working directory"},
		{Name: "INSTRUCTIONS", Value: envconf.String(&c.Instructions), Doc: "written to CLAUDE.md or AGENTS.md in the workspace"},
		{Name: "ALLOWED_COMMANDS", DefaultDoc: "(none: no shell command but the progress call)", ParseEmpty: true,
			Value: envconf.Func(func(s string) (err error) { c.AllowedCommands, err = protocol.ParseAllowedCommandsEnv(s); return err }),
			Doc:   "patterns of the shell commands the agent may run"},
		{Name: "API_URL", Value: envconf.String(&c.APIURL), Doc: "passed to the agent"},
		{Name: "USER_ID", Value: envconf.String(&c.UserID), Doc: "passed to the agent"},
		{Name: "DROID_BASE_URL", Value: envconf.String(&c.DroidBaseURL), Doc: "point Droid at an Anthropic-compatible API, through the proxy"},
		{Name: protocol.EnvMCPServers, Value: envconf.Func(func(s string) (err error) { c.MCPServers, err = protocol.ParseMCPServersEnv(s); return err }),
			Doc: "the spec's MCP servers, a JSON array; set by the spawner"},
		{Name: envMCPTimeout, Default: "30", Value: envconf.Duration(&c.MCPTimeout), Doc: "how long an MCP server may take to start"},
		{Name: protocol.EnvModelPrices, DefaultDoc: "built-in defaults", ParseEmpty: true,
			Value: envconf.Func(func(s string) (err error) { c.Prices, err = protocol.ParseModelPrices(s); return err }),
			Doc:   "the price table of an agent that reports no cost (Droid)"},
	}
}

// runVars: timings, buffers, retention and sessions.
func runVars(c *Config) []envconf.Var {
	return []envconf.Var{
		{Name: "TASK_TIMEOUT", Default: "600", Value: envconf.Duration(&c.TaskTimeout), Doc: "per-task timeout; a task's timeout_seconds overrides it"},
		{Name: "STALL_TIMEOUT", Default: "5m", Value: envconf.Duration(&c.StallTimeout), Doc: "a live agent that prints nothing this long is stopped"},
		{Name: protocol.EnvRetryAttempts, Default: strconv.Itoa(protocol.DefaultRetryAttempts), Value: envconf.Func(func(s string) (err error) { c.Retry.Attempts, err = protocol.ParseRetryAttempts(s); return err }),
			Doc: "attempts in all of a task that asks for retries (`retry`) without saying how many"},
		{Name: protocol.EnvRetryBackoffMS, Default: protocol.FormatRetryBackoffMS(protocol.DefaultRetryBackoffMS),
			Value: envconf.Func(func(s string) (err error) { c.Retry.BackoffMS, err = protocol.ParseRetryBackoffMS(s); return err }),
			Doc:   "ms to wait before the 2nd, 3rd... attempt (the last repeats) of a task whose `retry` gives no backoff_ms"},
		{Name: "HEARTBEAT_INTERVAL", Default: "10", Value: envconf.Duration(&c.HeartbeatInterval), Doc: "the heartbeat key lives three intervals"},
		{Name: "DEGRADED_COOLDOWN", Default: "60", Value: envconf.Duration(&c.DegradedCooldown), Doc: "a degraded worker's wait before its health check (a heartbeat round trip); doubled for each degradation in a row"},
		{Name: "SHUTDOWN_GRACE", Default: "20", Value: envconf.Duration(&c.ShutdownGrace), Doc: "time a running task gets after SIGTERM"},
		{Name: "RESULT_GRACE", Default: "3", Value: envconf.Duration(&c.ResultGrace), Doc: "time the agent may take to exit after its result line"},
		{Name: "KILL_GRACE", Default: "5", Value: envconf.Duration(&c.KillGrace), Doc: "SIGTERM to SIGKILL"},
		{Name: "PROGRESS_ADDR", Default: "127.0.0.1:0", Value: envconf.String(&c.ProgressAddr), Doc: "the progress and health endpoint"},
		{Name: "EVENT_BUFFER", Default: "1000", Value: envconf.Int(&c.EventBuffer, 1), Doc: "events kept while Redis is unreachable"},
		{Name: "PAUSE_AFTER_OUTPUT", Default: "true", Value: envconf.Bool(&c.PauseAfterOutput), Doc: "ask the manager to pause the worker after each output"},
		{Name: protocol.EnvStreamMaxLen, Default: strconv.FormatInt(protocol.DefaultStreamMaxLen, 10), Value: envconf.Int(&c.StreamMaxLen, 0),
			Doc: "approximate MAXLEN of every XADD the wrapper makes (0: no trimming)"},
		{Name: protocol.EnvRunRetention, Default: envconf.FormatDuration(protocol.DefaultRunRetention), Value: envconf.Duration(&c.RunRetention),
			Doc: "a run hash expires this long after its terminal state"},
		{Name: "SESSION_POLICY", Default: "project", Value: envconf.Enum(&c.SessionPolicy, "project", "new"), Doc: "project: continue the project's session; new: one per task"},
		{Name: "SESSION_CONTEXT_THRESHOLD", Default: "150000", Value: envconf.Int(&c.Sessions.ContextThreshold, 1), Doc: "context tokens at which a session is retired"},
		{Name: "SESSION_STALE_AFTER", Default: "24h", Value: envconf.Duration(&c.Sessions.StaleAfter), Doc: "a session idle this long is retired"},
		{Name: "SESSION_AFFINITY", Default: "30m", Value: envconf.Duration(&c.Sessions.Affinity), Doc: "how long a project's session stays bound to its worker"},
		{Name: "SESSION_SUMMARIZE", Default: "true", Value: envconf.Bool(&c.Sessions.Summarize), Doc: "a retiring session summarises the project for the next one"},
		{Name: "SESSION_STORE", Default: "redis", Value: envconf.Enum(&c.SessionStore, "redis", "off"), Doc: "redis: save each session's files to Redis so that another container resumes it; off: none"},
		{Name: "SESSION_STORE_MAX_BYTES", Default: "8388608", Value: envconf.Int(&c.SessionStoreMax, 1), Doc: "a session whose files are larger compressed is not stored"},
	}
}

// elsewhereVars are read by their users, not into Config: the model
// credentials by the model proxy (secrets.go), which keeps them out of
// Config, and LOG_LEVEL by main before anything else.
var elsewhereVars = []envconf.Var{
	{Name: "ANTHROPIC_API_KEY", Doc: "the model API key, held by the wrapper's proxy only"},
	{Name: "ANTHROPIC_AUTH_TOKEN", Doc: "used instead of ANTHROPIC_API_KEY when that is unset, as a bearer token"},
	{Name: "ANTHROPIC_BASE_URL", DefaultDoc: "`https://api.anthropic.com`", Doc: "where the proxy forwards Claude's calls"},
	{Name: "OPENAI_API_KEY", Doc: "Codex's model API key, held by the wrapper's proxy only (sent upstream as a bearer token)"},
	{Name: "OPENAI_BASE_URL", DefaultDoc: "`https://api.openai.com`", Doc: "where the proxy forwards Codex's calls (a trailing /v1 is dropped: Codex's paths carry it)"},
	{Name: "FACTORY_API_KEY", Doc: "Droid's login to Factory, passed to Droid only without DROID_BASE_URL"},
	{Name: "LOG_LEVEL", DefaultDoc: "`info`", Doc: "debug for more"},
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
