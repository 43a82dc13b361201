package worker

import (
	"fmt"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// Invocation is one agent run's command line (agent.Invocation).
type Invocation = agent.Invocation

// SystemPromptSection is what the wrapper appends to every agent's system
// prompt (agent.SystemPromptSection).
const SystemPromptSection = agent.SystemPromptSection

// setup is what the agent's adapter needs of c.
func (c *Config) setup() agent.Setup {
	return agent.Setup{WorkerID: c.WorkerID, Bin: c.AgentBin, Args: c.AgentArgs, Workspace: c.Workspace, Model: c.AgentModel,
		PTY: c.PTY, JSONSchema: c.JSONSchema, SkipPermissions: c.SkipPermissions, Allowed: c.AllowedCommands,
		Approval: c.Approval, MCPServers: c.MCPServers, MCPTimeout: c.MCPTimeout, SelfPath: c.SelfPath, BaseURL: c.DroidBaseURL}
}

// adapter is the adapter of the configured agent CLI: the one place the
// wrapper picks by agent type (agent.For). It is made from c each time,
// so it always reflects c. The type was checked when c was read.
func (c *Config) adapter() agent.Adapter {
	a, err := agent.For(c.AgentType, c.setup())
	if err != nil {
		panic(fmt.Sprintf("worker: %v (the configuration was not checked)", err))
	}
	return a
}

// caps is what the configured agent can do.
func (c *Config) caps() agent.Caps { return c.adapter().Caps() }

// Argv is the command line of a process that runs one task.
func (c *Config) Argv(inv Invocation) []string { return c.adapter().TaskArgv(inv) }

// PromptStdin is what that process reads on its stdin: the prompt, which
// never goes on the command line (one argument is limited to 128 KiB, a
// prompt may be protocol.MaxPromptBytes), except on a pty.
func (c *Config) PromptStdin(inv Invocation) []byte { return c.adapter().PromptStdin(inv) }

// PersistentArgv is the command line of an agent process that reads its
// messages from stdin (AGENT_PERSISTENT).
func (c *Config) PersistentArgv(inv Invocation) []string { return c.adapter().PersistentArgv(inv) }

// PersistentInput is the dialect and the output parser of a persistent
// agent process whose session is resumeID ("": a new one).
func (c *Config) PersistentInput(resumeID string) (agent.Dialect, agent.Parser) {
	return c.adapter().PersistentInput(resumeID)
}

// Parser returns the output parser of the configured agent.
func (c *Config) Parser() agent.Parser { return c.adapter().Parser() }

// invocationFor is the invocation of a task in plan's session. A new
// session carries the project's context (from earlier sessions) where the
// agent reads it.
func invocationFor(a agent.Adapter, task protocol.Task, plan SessionPlan) Invocation {
	inv := Invocation{Prompt: task.Prompt, ResumeID: plan.ResumeID, MaxBudgetUSD: task.MaxBudgetUSD}
	if plan.ResumeID != "" || strings.TrimSpace(plan.Context) == "" {
		return inv
	}
	return a.WithContext(inv, "# Project context (from earlier sessions of this project)\n"+plan.Context)
}
