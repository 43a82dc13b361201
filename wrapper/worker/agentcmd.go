package worker

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// SystemPromptSection is appended to the agent's system prompt: how to
// report progress and how to stop.
const SystemPromptSection = `# Working as an autonomous worker
You run unattended: nobody reads your terminal. Two channels reach the people who gave you the task.

1. Progress ("I keep going"). At each major step, run this in your shell; it returns at once:
   worker-wrapper progress --step "<what you are doing>" --pct <0-100>

2. Stop output ("I stopped"). When you stop, for whatever reason, end your final message with exactly one JSON object:
   {"status": "complete", "result": {...}}            the task is done; result says what you produced
   {"status": "blocked", "question": "<question>"}   you need an answer to go on
   {"status": "failed", "result": {"reason": "..."}} you cannot do it
`

// droidCustomModel is the name of the custom model the wrapper declares in
// Droid's settings when DROID_BASE_URL is set.
const droidCustomModel = "agentvisor"

// Invocation is one agent run's command line.
type Invocation struct {
	Prompt   string
	ResumeID string // continue this session; "" for a new one
	Extra    string // appended to the system prompt after SystemPromptSection
	// MaxBudgetUSD: Claude's --max-budget-usd (the task's max_budget_usd).
	MaxBudgetUSD float64
}

// systemPrompt is what the agent's system prompt gets appended.
func systemPrompt(inv Invocation) string {
	if inv.Extra != "" {
		return SystemPromptSection + "\n" + inv.Extra
	}
	return SystemPromptSection
}

// Argv builds the agent's command line.
func (c *Config) Argv(inv Invocation) []string {
	system := systemPrompt(inv)
	switch c.AgentType {
	case protocol.AgentDroid:
		argv := []string{c.AgentBin, "exec", "-o", "stream-json", "--cwd", c.Workspace}
		argv = append(argv, c.permissionArgs()...)
		argv = append(argv, c.mcpArgs()...)
		if inv.ResumeID != "" {
			argv = append(argv, "--session-id", inv.ResumeID)
		}
		if m := c.droidModel(); m != "" {
			argv = append(argv, "-m", m)
		}
		argv = append(argv, "--append-system-prompt", system)
		argv = append(argv, c.AgentArgs...)
		if c.PTY {
			return append(argv, inv.Prompt)
		}
		return append(argv, "-f", "/dev/stdin") // the prompt: see PromptStdin
	default:
		argv := []string{c.AgentBin, "-p"}
		if c.PTY {
			argv = append(argv, inv.Prompt)
		}
		argv = append(argv, "--output-format", "stream-json", "--verbose")
		argv = append(argv, c.permissionArgs()...)
		argv = append(argv, c.mcpArgs()...)
		if inv.ResumeID != "" {
			argv = append(argv, "--resume", inv.ResumeID)
		}
		if c.AgentModel != "" {
			argv = append(argv, "--model", c.AgentModel)
		}
		if inv.MaxBudgetUSD > 0 {
			argv = append(argv, "--max-budget-usd", strconv.FormatFloat(inv.MaxBudgetUSD, 'f', -1, 64))
		}
		argv = append(argv, "--append-system-prompt", system)
		if c.JSONSchema {
			argv = append(argv, "--json-schema", protocol.StopOutputSchema())
		}
		return append(argv, c.AgentArgs...)
	}
}

// PromptStdin is what the agent reads on its stdin: the prompt, which
// never goes on the command line (one argument is limited to 128 KiB, a
// prompt may be protocol.MaxPromptBytes). Claude -p reads it from stdin,
// Droid from -f /dev/stdin. On a pty (AGENT_PTY) stdin is the terminal:
// the prompt stays in argv, so a prompt there is limited to 128 KiB.
func (c *Config) PromptStdin(inv Invocation) []byte {
	if c.PTY {
		return nil
	}
	return []byte(inv.Prompt)
}

// PersistentArgv is the command line of an agent process that reads its
// messages from stdin (AGENT_PERSISTENT). Claude: Argv with stream-json
// input. Droid: its JSON-RPC mode, whose session (inv's to resume, or a
// new one) is opened on stdin (PersistentInput), and whose prompts come
// as messages: neither --session-id nor -f. The session's model and
// autonomy come in the opening request too (Droid's flags do not
// configure it); -m is still checked by Droid at start.
func (c *Config) PersistentArgv(inv Invocation) []string {
	if c.AgentType == protocol.AgentDroid {
		argv := []string{c.AgentBin, "exec", "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc", "--cwd", c.Workspace}
		argv = append(argv, c.permissionArgs()...)
		if m := c.droidModel(); m != "" {
			argv = append(argv, "-m", m)
		}
		argv = append(argv, "--append-system-prompt", systemPrompt(inv))
		return append(argv, c.AgentArgs...)
	}
	argv := c.Argv(inv)
	// --replay-user-messages: Claude echoes each message it takes, so that
	// a steering message answered in a turn of its own is waited for.
	out := []string{argv[0], "-p", "--input-format", "stream-json", "--replay-user-messages"}
	return c.approvalArgs(append(out, argv[2:]...)) // argv[1] is -p (never on a pty)
}

// PersistentInput is the dialect and the output parser of a persistent
// agent process whose session is resumeID ("": a new one): nil and
// Claude's parser for Claude (its session is on the command line), one
// agent.DroidRPC for both for Droid.
func (c *Config) PersistentInput(resumeID string) (agent.Dialect, agent.Parser) {
	if c.AgentType != protocol.AgentDroid {
		return nil, c.Parser()
	}
	s := agent.DroidSession{Cwd: c.Workspace, ModelID: c.droidModel(), SkipPermissions: true}
	if c.AllowedCommands.ShellRules().All && !c.SkipPermissions {
		s.SkipPermissions, s.AutonomyLevel = false, "high" // as --auto high
	}
	d := agent.NewDroidRPC(s, resumeID)
	return d, d
}

func (c *Config) droidModel() string {
	if c.DroidBaseURL != "" {
		return "custom:" + c.droidCustomID()
	}
	return c.AgentModel
}

// droidCustomID is the model id of the custom model declared for
// DROID_BASE_URL: AGENT_MODEL (what the API at that URL serves, such as a
// real Anthropic model), or a name of our own for the stub.
func (c *Config) droidCustomID() string {
	if c.AgentModel != "" {
		return c.AgentModel
	}
	return droidCustomModel
}

// Parser returns the output parser of the configured agent.
func (c *Config) Parser() agent.Parser {
	if c.AgentType == protocol.AgentDroid {
		return agent.DroidParser{}
	}
	return agent.ClaudeParser{}
}

// AgentEnv builds the agent's environment from the wrapper's: everything
// but the wrapper's own variables (hiddenFromAgent: its secrets and
// configuration), plus the model API proxy's URL and token, the progress
// endpoint and the run's ids.
func (c *Config) AgentEnv(base []string, progressURL, token string, task protocol.Task) []string {
	env := make([]string, 0, len(base)+12)
	path := ""
	for _, kv := range base {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case c.hiddenFromAgent(name):
		case name == "PATH":
			path = value
		default:
			env = append(env, kv)
		}
	}
	if c.SelfPath != "" {
		path = filepath.Dir(c.SelfPath) + string(os.PathListSeparator) + path
	}
	env = append(env, c.modelEnv()...)
	env = append(env, c.mcpEnv()...)
	env = append(env,
		"PATH="+path,
		"WORKER_ID="+c.WorkerID,
		"WORKER_PROGRESS_URL="+progressURL,
		"WORKER_PROGRESS_TOKEN="+token,
		"WORKER_REQUEST_ID="+task.RequestID,
		"WORKER_TASK_ID="+task.TaskID,
		"WORKER_PROJECT_ID="+task.Project(),
	)
	if c.SelfPath != "" {
		env = append(env, "WORKER_WRAPPER_BIN="+c.SelfPath)
	}
	if c.AgentType == protocol.AgentClaude {
		// Claude refuses to skip permissions as root outside a sandbox;
		// a worker container is that sandbox.
		if os.Geteuid() == 0 {
			env = append(env, "IS_SANDBOX=1")
		}
		env = append(env, "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1")
	}
	return env
}

// PrepareWorkspace creates the workspace, writes the instructions file the
// agent reads (CLAUDE.md or AGENTS.md), and, for Droid with DROID_BASE_URL,
// declares the custom model in ~/.factory/settings.json: at the model API
// proxy with its token once Run started the proxy, else at DROID_BASE_URL
// with apiKey.
func (c *Config) PrepareWorkspace(home, apiKey string) error {
	if err := os.MkdirAll(c.Workspace, 0o755); err != nil {
		return fmt.Errorf("workspace %s: %w", c.Workspace, err)
	}
	if c.Instructions != "" {
		name := "CLAUDE.md"
		if c.AgentType == protocol.AgentDroid {
			name = "AGENTS.md"
		}
		if err := os.WriteFile(filepath.Join(c.Workspace, name), []byte(c.Instructions), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	if c.AgentType == protocol.AgentDroid && c.DroidBaseURL != "" {
		if home == "" {
			return fmt.Errorf("droid settings: HOME is not set")
		}
		baseURL := c.DroidBaseURL
		if c.model.url != "" {
			baseURL, apiKey = c.model.url, c.model.token
		}
		if apiKey == "" {
			apiKey = "unused"
		}
		settings := map[string]any{"customModels": []map[string]any{{
			"model": c.droidCustomID(), "displayName": "agentvisor", "baseUrl": baseURL,
			"apiKey": apiKey, "provider": "anthropic", "maxOutputTokens": 8192,
		}}}
		b, _ := json.MarshalIndent(settings, "", "  ")
		dir := filepath.Join(home, ".factory")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("droid settings: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "settings.json"), b, 0o600); err != nil {
			return fmt.Errorf("droid settings: %w", err)
		}
	}
	return nil
}

// Redactor replaces secret values with [REDACTED] in text that leaves the
// wrapper (error messages, stderr tails, logs).
type Redactor struct{ secrets []string }

// NewRedactor collects the values of variables whose names say they are
// secret (KEY, TOKEN, SECRET, PASSWORD), and the Redis password.
func NewRedactor(environ []string, redisURL string) *Redactor {
	r := &Redactor{}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		up := strings.ToUpper(name)
		if len(value) >= 6 && (strings.Contains(up, "KEY") || strings.Contains(up, "TOKEN") ||
			strings.Contains(up, "SECRET") || strings.Contains(up, "PASSWORD")) {
			r.secrets = append(r.secrets, value)
		}
	}
	// The Redis passwords (the server's, and a sentinel URL's
	// sentinel_password), as they are and as the URL spells them.
	if _, rest, ok := strings.Cut(redisURL, "://"); ok {
		if userinfo, _, ok := strings.Cut(rest, "@"); ok {
			if _, pw, ok := strings.Cut(userinfo, ":"); ok && len(pw) >= 4 {
				r.secrets = append(r.secrets, pw)
			}
		}
	}
	if u, err := protocol.ParseRedisURL(redisURL); err == nil {
		for _, pw := range []string{u.Password, u.SentinelPassword} {
			if len(pw) >= 4 {
				r.secrets = append(r.secrets, pw, url.QueryEscape(pw))
			}
		}
	}
	return r
}

// Redact returns s with every secret replaced.
func (r *Redactor) Redact(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "[REDACTED]")
	}
	return s
}
