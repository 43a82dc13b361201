package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Config is the wrapper's configuration, filled from the environment in
// one place (FromEnv) and validated at start.
type Config struct {
	WorkerID string // WORKER_ID (required)
	Host     string // WORKER_HOST: the fleet host whose engine runs the worker (on its lifecycle events)
	RedisURL string // REDIS_URL (required): redis://, rediss://, redis+sentinel:// or rediss+sentinel:// (protocol.ParseRedisURL)
	// RedisWait is WAIT's policy for the writes that matter (a task's
	// output with its acknowledgement): REDIS_WAIT_REPLICAS (1 for a
	// sentinel URL, 0 otherwise) and REDIS_WAIT_TIMEOUT.
	RedisWait protocol.WaitPolicy
	Keys      protocol.Keys      // WORKER_KEY_PREFIX (default "worker")
	AgentType protocol.AgentType // AGENT_TYPE (required): claude or droid
	Kind      protocol.Kind      // WORKER_KIND: long_lived (default) or developer

	AgentBin   string   // AGENT_BIN: the agent's executable (default claude or droid on PATH)
	AgentArgs  []string // AGENT_ARGS: extra flags, a JSON array or words separated by spaces
	AgentModel string   // AGENT_MODEL: --model (claude) or -m (droid)
	PTY        bool     // AGENT_PTY: run the agent on a pseudo-terminal
	// SkipPermissions (AGENT_SKIP_PERMISSIONS, default true) matters only
	// with ALLOWED_COMMANDS=*: Claude --dangerously-skip-permissions and
	// Droid --skip-permissions-unsafe; false: Claude dontAsk with every
	// Bash command allowed, Droid --auto high (permissions.go).
	SkipPermissions bool
	// Persistent (AGENT_PERSISTENT, default false) keeps one agent process
	// alive across the tasks of a long-lived worker (Claude's stream-json
	// input, Droid's JSON-RPC mode), so that a follow-up in the same
	// session needs no new process and no resume. The worker falls back
	// to a process per task when it dies. A Droid worker with MCP
	// servers runs a process per task (persistent.go).
	Persistent bool
	// Prewarm (AGENT_PREWARM, default false; needs AGENT_PERSISTENT) starts
	// the persistent process for a new session when the worker starts,
	// before any task: the first task that wants a new session (no
	// project context to add) finds its agent up. The manager sets it for
	// warm pool workers.
	Prewarm bool
	// JSONSchema (AGENT_JSON_SCHEMA, default false) hands Claude the stop
	// output schema (--json-schema) and takes its structured_output.
	JSONSchema bool

	Workspace       string                   // WORKSPACE (default /workspace)
	Instructions    string                   // INSTRUCTIONS: written to CLAUDE.md or AGENTS.md
	AllowedCommands protocol.AllowedCommands // ALLOWED_COMMANDS
	APIURL          string                   // API_URL, passed to the agent
	UserID          string                   // USER_ID, passed to the agent

	TaskTimeout  time.Duration // TASK_TIMEOUT (default 600s)
	StallTimeout time.Duration // STALL_TIMEOUT (default 5m): no line from a live agent this long ends its task
	// RecycleTasks and RecycleRSS recycle the persistent agent process
	// after that many tasks, or once its group's RSS passed that many
	// bytes (AGENT_RECYCLE_TASKS, default 100; AGENT_RECYCLE_RSS in MiB,
	// default 1024); 0 turns either off.
	RecycleTasks int
	RecycleRSS   int64
	// Approval (AGENT_APPROVAL, default false): the persistent Claude asks,
	// on its control channel, before each tool call ALLOWED_COMMANDS does
	// not allow; the task's owner answers within ApprovalTimeout
	// (APPROVAL_TIMEOUT, default 5m), or it is denied. A Droid worker
	// ignores it (logged at start): its calls outside the list are
	// refused, as without it.
	Approval          bool
	ApprovalTimeout   time.Duration
	HeartbeatInterval time.Duration // HEARTBEAT_INTERVAL (default 10s)
	ShutdownGrace     time.Duration // SHUTDOWN_GRACE (default 20s): time a running task gets after SIGTERM
	ResultGrace       time.Duration // RESULT_GRACE (default 3s)
	KillGrace         time.Duration // KILL_GRACE (default 5s): SIGTERM to SIGKILL
	ProgressAddr      string        // PROGRESS_ADDR (default 127.0.0.1:0)
	EventBuffer       int           // EVENT_BUFFER (default 1000): events kept while Redis is down
	PauseAfterOutput  bool          // PAUSE_AFTER_OUTPUT (default true): ask the spawner to pause after each output

	// StreamMaxLen (STREAM_MAXLEN, default protocol.DefaultStreamMaxLen)
	// is the approximate MAXLEN of every XADD the wrapper makes; 0 turns
	// trimming off.
	StreamMaxLen int64
	// RunRetention (RUN_RETENTION, default protocol.DefaultRunRetention)
	// is how long a run hash lives after its terminal state.
	RunRetention time.Duration

	// SessionPolicy (SESSION_POLICY) is "project" (default: continue the
	// project's session while it is small and recent) or "new" (a new
	// session for every task).
	SessionPolicy string
	// Sessions tunes the project policy: SESSION_CONTEXT_THRESHOLD
	// (150000), SESSION_STALE_AFTER (24h), SESSION_AFFINITY (30m),
	// SESSION_SUMMARIZE (true).
	Sessions SessionConfig

	// DroidBaseURL (DROID_BASE_URL) points Droid at an Anthropic-compatible
	// API through a custom model in ~/.factory/settings.json.
	DroidBaseURL string
	// MCPServers (AGENT_MCP_SERVERS, set by the spawner from the spec) are
	// the agent's MCP servers, and MCPTimeout (AGENT_MCP_TIMEOUT, default
	// 30s) how long a server may take to start (mcp.go).
	MCPServers []protocol.MCPServer
	MCPTimeout time.Duration
	// Prices (MODEL_PRICES, a JSON object put over
	// protocol.DefaultModelPrices) price the model calls of an agent that
	// reports no cost of its own (cost.go).
	Prices protocol.ModelPrices
	// SelfPath is the wrapper's own executable, put on the agent's PATH so
	// that `worker-wrapper progress` works from its shell tool.
	SelfPath string

	model modelAPI // the model API proxy, as the agent sees it (secrets.go)
}

// FromEnv reads the configuration from getenv (os.Getenv in production).
// Every error names the variable.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		WorkerID:     getenv("WORKER_ID"),
		Host:         getenv(protocol.EnvWorkerHost),
		RedisURL:     getenv("REDIS_URL"),
		AgentBin:     getenv("AGENT_BIN"),
		AgentModel:   getenv("AGENT_MODEL"),
		Workspace:    getenv("WORKSPACE"),
		Instructions: getenv("INSTRUCTIONS"),
		APIURL:       getenv("API_URL"),
		UserID:       getenv("USER_ID"),
		ProgressAddr: getenv("PROGRESS_ADDR"),
		DroidBaseURL: getenv("DROID_BASE_URL"),
	}
	var err error
	fail := func(name string, e error) (Config, error) { return Config{}, fmt.Errorf("config: %s: %w", name, e) }

	if c.WorkerID == "" {
		return fail("WORKER_ID", fmt.Errorf("required"))
	}
	if e := checkID(c.WorkerID); e != nil {
		return fail("WORKER_ID", e)
	}
	if c.RedisURL == "" {
		return fail("REDIS_URL", fmt.Errorf("required (redis://[:password@]host:port/db, or redis+sentinel://host:port,.../master/db)"))
	}
	u, err := protocol.ParseRedisURL(c.RedisURL)
	if err != nil {
		return fail("REDIS_URL", err) // the parser's errors never quote the URL
	}
	if c.RedisWait, err = protocol.ParseWaitPolicy(getenv(protocol.EnvRedisWaitReplicas), getenv(protocol.EnvRedisWaitTimeout), u); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if c.Keys, err = protocol.NewKeys(getenv("WORKER_KEY_PREFIX")); err != nil {
		return fail("WORKER_KEY_PREFIX", err)
	}
	if v := getenv("AGENT_TYPE"); v == "" {
		return fail("AGENT_TYPE", fmt.Errorf("required (claude or droid)"))
	} else if c.AgentType, err = protocol.ParseAgentType(v); err != nil {
		return fail("AGENT_TYPE", err)
	}
	c.Kind = protocol.KindLongLived
	if v := getenv("WORKER_KIND"); v != "" {
		if c.Kind, err = protocol.ParseKind(v); err != nil {
			return fail("WORKER_KIND", err)
		}
	}
	if c.AgentBin == "" {
		c.AgentBin = string(c.AgentType)
	}
	if c.AgentArgs, err = parseArgs(getenv("AGENT_ARGS")); err != nil {
		return fail("AGENT_ARGS", err)
	}
	bools := []struct {
		name string
		dst  *bool
		def  bool
	}{
		{"AGENT_PTY", &c.PTY, false},
		{"AGENT_SKIP_PERMISSIONS", &c.SkipPermissions, true},
		{"AGENT_JSON_SCHEMA", &c.JSONSchema, false},
		{"AGENT_PERSISTENT", &c.Persistent, false},
		{"AGENT_PREWARM", &c.Prewarm, false},
		{"AGENT_APPROVAL", &c.Approval, false},
		{"PAUSE_AFTER_OUTPUT", &c.PauseAfterOutput, true},
	}
	for _, b := range bools {
		if *b.dst, err = parseBool(getenv(b.name), b.def); err != nil {
			return fail(b.name, err)
		}
	}
	if c.Prewarm && !c.Persistent {
		return fail("AGENT_PREWARM", fmt.Errorf("needs AGENT_PERSISTENT=true"))
	}
	if c.JSONSchema && c.AgentType != protocol.AgentClaude {
		return fail("AGENT_JSON_SCHEMA", fmt.Errorf("only Claude takes a JSON schema"))
	}
	if c.Persistent && (c.Kind != protocol.KindLongLived || c.PTY) {
		return fail("AGENT_PERSISTENT", fmt.Errorf("only for a long-lived worker without a pty"))
	}
	if c.Approval && !c.Persistent && c.AgentType == protocol.AgentClaude {
		return fail("AGENT_APPROVAL", fmt.Errorf("needs AGENT_PERSISTENT=true: Claude asks on the persistent process's control channel"))
	}
	if c.Workspace == "" {
		c.Workspace = "/workspace"
	}
	if c.AllowedCommands, err = protocol.ParseAllowedCommandsEnv(getenv("ALLOWED_COMMANDS")); err != nil {
		return fail("ALLOWED_COMMANDS", err)
	}
	durations := []struct {
		name string
		dst  *time.Duration
		def  time.Duration
	}{
		{"TASK_TIMEOUT", &c.TaskTimeout, 600 * time.Second},
		{"STALL_TIMEOUT", &c.StallTimeout, 5 * time.Minute},
		{"APPROVAL_TIMEOUT", &c.ApprovalTimeout, 5 * time.Minute},
		{"HEARTBEAT_INTERVAL", &c.HeartbeatInterval, 10 * time.Second},
		{"SHUTDOWN_GRACE", &c.ShutdownGrace, 20 * time.Second},
		{"RESULT_GRACE", &c.ResultGrace, 3 * time.Second},
		{"KILL_GRACE", &c.KillGrace, 5 * time.Second},
		{protocol.EnvRunRetention, &c.RunRetention, protocol.DefaultRunRetention},
	}
	for _, d := range durations {
		if *d.dst, err = parseDuration(getenv(d.name), d.def); err != nil {
			return fail(d.name, err)
		}
	}
	c.SessionPolicy = getenv("SESSION_POLICY")
	switch c.SessionPolicy {
	case "":
		c.SessionPolicy = "project"
	case "project", "new":
	default:
		return fail("SESSION_POLICY", fmt.Errorf("want project or new, got %q", c.SessionPolicy))
	}
	if v := getenv("SESSION_CONTEXT_THRESHOLD"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fail("SESSION_CONTEXT_THRESHOLD", fmt.Errorf("want a positive number of tokens, got %q", v))
		}
		c.Sessions.ContextThreshold = n
	}
	if c.Sessions.StaleAfter, err = parseDuration(getenv("SESSION_STALE_AFTER"), 24*time.Hour); err != nil {
		return fail("SESSION_STALE_AFTER", err)
	}
	if c.Sessions.Affinity, err = parseDuration(getenv("SESSION_AFFINITY"), 30*time.Minute); err != nil {
		return fail("SESSION_AFFINITY", err)
	}
	if c.Sessions.Summarize, err = parseBool(getenv("SESSION_SUMMARIZE"), true); err != nil {
		return fail("SESSION_SUMMARIZE", err)
	}
	if c.ProgressAddr == "" {
		c.ProgressAddr = "127.0.0.1:0"
	}
	c.EventBuffer = 1000
	if v := getenv("EVENT_BUFFER"); v != "" {
		if c.EventBuffer, err = strconv.Atoi(v); err != nil || c.EventBuffer < 1 {
			return fail("EVENT_BUFFER", fmt.Errorf("want a positive whole number, got %q", v))
		}
	}
	c.RecycleTasks = 100
	if v := getenv("AGENT_RECYCLE_TASKS"); v != "" {
		if c.RecycleTasks, err = strconv.Atoi(v); err != nil || c.RecycleTasks < 0 {
			return fail("AGENT_RECYCLE_TASKS", fmt.Errorf("want a whole number of tasks (0: never), got %q", v))
		}
	}
	rssMiB := int64(1024)
	if v := getenv("AGENT_RECYCLE_RSS"); v != "" {
		if rssMiB, err = strconv.ParseInt(v, 10, 64); err != nil || rssMiB < 0 {
			return fail("AGENT_RECYCLE_RSS", fmt.Errorf("want a whole number of MiB (0: never), got %q", v))
		}
	}
	c.RecycleRSS = rssMiB << 20
	c.StreamMaxLen = protocol.DefaultStreamMaxLen
	if v := getenv(protocol.EnvStreamMaxLen); v != "" {
		if c.StreamMaxLen, err = strconv.ParseInt(v, 10, 64); err != nil || c.StreamMaxLen < 0 {
			return fail(protocol.EnvStreamMaxLen, fmt.Errorf("want a whole number of entries (0: no trimming), got %q", v))
		}
	}
	if c.Prices, err = protocol.ParseModelPrices(getenv(protocol.EnvModelPrices)); err != nil {
		return fail(protocol.EnvModelPrices, err)
	}
	if err := c.readMCP(getenv); err != nil {
		return Config{}, err
	}
	return c, nil
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

func parseBool(s string, def bool) (bool, error) {
	if s == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("want true or false, got %q", s)
	}
	return b, nil
}

// parseDuration accepts Go durations ("90s", "10m") and plain seconds ("600").
func parseDuration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("must be positive, got %q", s)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("want a positive duration such as 600 or 10m, got %q", s)
	}
	return d, nil
}
