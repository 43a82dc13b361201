package worker

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

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
	env = append(env, c.adapter().Env(c.model)...)
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
	return env
}

// PrepareWorkspace creates the workspace, writes the instructions file the
// agent reads (its adapter names it: CLAUDE.md, AGENTS.md), and the files
// the agent's adapter gives it before it starts (agent.Adapter.Prepare):
// its model settings (at the model API proxy once Run started it, else
// with apiKey), its MCP configuration, its permission hooks.
func (c *Config) PrepareWorkspace(home, apiKey string) error {
	if err := os.MkdirAll(c.Workspace, 0o755); err != nil {
		return fmt.Errorf("workspace %s: %w", c.Workspace, err)
	}
	a := c.adapter()
	if c.Instructions != "" {
		name := a.InstructionsFile()
		if err := os.WriteFile(filepath.Join(c.Workspace, name), []byte(c.Instructions), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return a.Prepare(home, c.model, apiKey)
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
