package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/egress"
)

// SystemPromptSection is appended to the agent's system prompt: how to
// report progress and how to stop.
const SystemPromptSection = `# Working as an autonomous worker
You run unattended: nobody reads your terminal. Two channels reach the people who gave you the task.

1. Progress ("I keep going"). At each major step, run this in your shell; it returns at once:
   worker-wrapper progress --step "<what you are doing>" --pct <0-100>
   Once you know how many steps the task has, add --total <steps>.

2. Stop output ("I stopped"). When you stop, for whatever reason, end your final message with exactly one JSON object:
   {"status": "complete", "result": {...}}            the task is done; result says what you produced
   {"status": "blocked", "question": "<question>"}   you need an answer to go on
   {"status": "failed", "result": {"reason": "..."}} you cannot do it
`

// Invocation is one agent run's command line.
type Invocation = agent.Invocation

// agentSettings are the settings of the configured agent's adapter.
func (c *Config) agentSettings() agent.Settings {
	return agent.Settings{Bin: c.AgentBin, Args: c.AgentArgs, Model: c.AgentModel, Workspace: c.Workspace, PTY: c.PTY,
		SystemPrompt: SystemPromptSection, AllowedCommands: c.AllowedCommands, SkipPermissions: c.SkipPermissions,
		JSONSchema: c.JSONSchema, Approval: c.Approval, MCPServers: c.MCPServers, MCPTimeout: c.MCPTimeout,
		BaseURL: c.DroidBaseURL, RuntimeDir: filepath.Join(os.TempDir(), "agentvisor-"+c.WorkerID), SelfPath: c.SelfPath,
		Command: c.AgentCommand}
}

// AgentEnv builds the agent's environment from the wrapper's: everything
// but the wrapper's own variables (wrapperOnly: its secrets and
// configuration) that its adapter does not keep, plus the model API proxy's URL and token, the progress
// endpoint and the run's ids.
func (c *Config) AgentEnv(ad agent.Adapter, base []string, progressURL, token string, task protocol.Task) []string {
	env := make([]string, 0, len(base)+12)
	path := ""
	for _, kv := range base {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case wrapperOnly[name] && !ad.KeepsEnv(name):
		case name == "PATH":
			path = value
		default:
			env = append(env, kv)
		}
	}
	if c.SelfPath != "" {
		path = filepath.Dir(c.SelfPath) + string(os.PathListSeparator) + path
	}
	env = append(env, ad.Env(agent.ModelAPI{URL: c.model.url, Token: c.model.token})...)
	env = append(env, c.egress...)
	if len(c.egress) > 0 && len(c.CredentialHosts) > 0 {
		// Only through the egress front: without it, http:// would be
		// plain HTTP on the network.
		env = gitInsteadOf(env, c.CredentialHosts)
	}
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

// gitInsteadOf adds to env the git configuration that points git at
// http://host/ for hosts (egress.GitInsteadOf), after the entries of a
// GIT_CONFIG_COUNT env has already.
func gitInsteadOf(env []string, hosts []string) []string {
	n := 0
	out := env[:0]
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GIT_CONFIG_COUNT="); ok {
			n, _ = strconv.Atoi(v)
			n = max(n, 0)
			continue
		}
		out = append(out, kv)
	}
	return append(out, egress.GitInsteadOf(n, hosts)...)
}

// PrepareWorkspace creates the workspace, writes the instructions file the
// agent reads (its adapter names it), and the agent's configuration files
// (Adapter.Setup): with the model API proxy as Run started it, if any.
func (c *Config) PrepareWorkspace(ad agent.Adapter, home string) error {
	if err := os.MkdirAll(c.Workspace, 0o755); err != nil {
		return fmt.Errorf("workspace %s: %w", c.Workspace, err)
	}
	if c.Instructions != "" {
		name := ad.InstructionsFile()
		if err := os.WriteFile(filepath.Join(c.Workspace, name), []byte(c.Instructions), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return ad.Setup(home, agent.ModelAPI{URL: c.model.url, Token: c.model.token})
}
