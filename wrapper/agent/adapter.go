package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Adapter is everything the wrapper knows of one agent CLI: its command
// lines, its output parser and control dialect, how permissions, MCP
// servers and the model API are given to it, the files it reads, and what
// it can do (Caps). The rest of the wrapper asks an Adapter; it never
// branches on the agent type. Adding an agent is one file with its
// adapter and its parser, and one case in For.
type Adapter interface {
	// Type is the agent type the adapter serves.
	Type() protocol.AgentType
	// Caps says what the CLI can do.
	Caps() Caps
	// TaskArgv is the command line of a process that runs one task.
	TaskArgv(inv Invocation) []string
	// PromptStdin is what that process reads on its stdin (nil: none).
	PromptStdin(inv Invocation) []byte
	// PersistentArgv is the command line of a process that serves many
	// turns, read from its stdin (Caps.Persistent).
	PersistentArgv(inv Invocation) []string
	// PersistentInput is the control dialect and the output parser of a
	// persistent process whose session is resumeID ("": a new one); a nil
	// dialect is Claude's stream-json input.
	PersistentInput(resumeID string) (Dialect, Parser)
	// Parser reads the output of a process per task.
	Parser() Parser
	// WithContext puts a project's context (from its earlier sessions)
	// where the CLI reads it: the system prompt or the prompt.
	WithContext(inv Invocation, section string) Invocation
	// Env is what the agent's environment gets of the adapter: the model
	// API (through the wrapper's proxy at model, when it runs one), the
	// MCP settings, the CLI's own switches.
	Env(model ModelAPI) []string
	// Hidden reports whether the wrapper's variable name stays out of the
	// agent's environment for this CLI (a credential it must not hold),
	// and whether the adapter decides it at all.
	Hidden(name string) (hidden, decides bool)
	// Prepare writes the files the CLI reads before it starts: its model
	// settings, its MCP configuration, its permission hooks. home is the
	// agent's HOME; apiKey the credential when no proxy stands for it.
	Prepare(home string, model ModelAPI, apiKey string) error
	// InstructionsFile is the name of the instructions file the CLI reads
	// in its working directory.
	InstructionsFile() string
	// ProxyUpstream is where the wrapper's model proxy forwards, read from
	// the wrapper's environment; ok is false when the agent talks to its
	// vendor itself and no proxy runs.
	ProxyUpstream(getenv func(string) string) (upstream string, ok bool)
	// APIModel is the model the agent asks the API for, as far as the
	// configuration tells ("" when it does not).
	APIModel() string
	// CheckInit is the runner's check of the agent's init line: every MCP
	// server of the spec must be there (MCP_UNAVAILABLE otherwise).
	CheckInit(ev Event) *protocol.Error
	// Outcome turns what only this CLI's output shows (Droid refusing to
	// start without an MCP server) into the outcome's error.
	Outcome(o Outcome) Outcome
}

// Caps is what an agent CLI can do, which the wrapper asks instead of
// its type.
type Caps struct {
	// EstimatesCost: the CLI reports no cost of its own; the wrapper
	// meters its model calls and prices them.
	EstimatesCost bool
	// BudgetFlag: the CLI enforces a task's max_budget_usd itself, as a
	// flag of its process (so such a task runs in a process of its own).
	BudgetFlag bool
	// ResumesLocally: the CLI resumes a session from local files with a
	// new process, so a steering message that missed a turn can run as
	// the session's next turn.
	ResumesLocally bool
	// Approvals: the CLI can ask for a tool call on its control channel
	// (AGENT_APPROVAL, with a persistent process).
	Approvals bool
	// JSONSchema: the CLI takes the stop output's JSON schema.
	JSONSchema bool
	// OpensSession: a persistent process opens its session on its control
	// channel before it takes a message.
	OpensSession bool
	// PersistentMCP: the MCP servers of a persistent process are checked
	// (otherwise a worker with MCP servers runs a process per task).
	PersistentMCP bool
}

// Setup is what an adapter needs of the worker's configuration.
type Setup struct {
	WorkerID  string
	Bin       string   // the CLI's executable
	Args      []string // AGENT_ARGS, after the adapter's own flags
	Workspace string   // the agent's working directory
	Model     string   // AGENT_MODEL
	PTY       bool     // the agent runs on a pseudo-terminal
	// JSONSchema hands the CLI the stop output's schema.
	JSONSchema bool
	// SkipPermissions: with every shell command allowed, the CLI's
	// skip-permissions mode.
	SkipPermissions bool
	Allowed         protocol.AllowedCommands
	// Approval: what Allowed does not allow is asked of the task's owner.
	Approval   bool
	MCPServers []protocol.MCPServer
	MCPTimeout time.Duration
	// SelfPath is the wrapper's executable (hooks call it back).
	SelfPath string
	// BaseURL is a custom model API for a CLI that otherwise talks to its
	// vendor (Droid's DROID_BASE_URL).
	BaseURL string
}

// ModelAPI is the model API as the agent sees it: the wrapper's proxy's
// base URL and token; empty when no proxy runs.
type ModelAPI struct{ URL, Token string }

// For returns the adapter of agent type t: the one place that picks.
func For(t protocol.AgentType, s Setup) (Adapter, error) {
	switch t {
	case protocol.AgentClaude:
		return Claude{s}, nil
	case protocol.AgentDroid:
		return Droid{s}, nil
	}
	return nil, fmt.Errorf("agent: no adapter for agent type %q", t)
}

// Invocation is one agent run's command line.
type Invocation struct {
	Prompt   string
	ResumeID string // continue this session; "" for a new one
	Extra    string // appended to the system prompt after SystemPromptSection
	// MaxBudgetUSD: the task's max_budget_usd, for a CLI with BudgetFlag.
	MaxBudgetUSD float64
}

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

// systemPrompt is what the agent's system prompt gets appended.
func systemPrompt(inv Invocation) string {
	if inv.Extra != "" {
		return SystemPromptSection + "\n" + inv.Extra
	}
	return SystemPromptSection
}

// runtimeDir is the worker's own directory for the files it gives the
// agent (MCP configuration, hook settings).
func (s Setup) runtimeDir() string { return filepath.Join(os.TempDir(), "agentvisor-"+s.WorkerID) }

// MCPConfigPath is Claude's --mcp-config file.
func (s Setup) MCPConfigPath() string { return filepath.Join(s.runtimeDir(), "mcp.json") }

// GuardSettingsPath is the settings file that gives Droid its PreToolUse
// hook.
func (s Setup) GuardSettingsPath() string { return filepath.Join(s.runtimeDir(), "droid-guard.json") }

// writeReadOnly writes a file the agent must not change (read-only,
// replacing one left by an earlier start).
func writeReadOnly(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	_ = os.Remove(p)
	return os.WriteFile(p, b, 0o400)
}

// serverNames lists the spec's MCP servers by name.
func serverNames(servers []protocol.MCPServer) string {
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}
