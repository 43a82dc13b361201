package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Adapter is everything the wrapper knows of one agent CLI: how to run it
// for a task and as a persistent process, how to read it, what it must be
// given (permissions, MCP servers, the model API, its files), how its
// cost is known, and what it supports. The wrapper asks its adapter and
// never the agent's type. One file per CLI (claude.go, droid.go,
// codex.go, opencode.go, qwen.go; acp.go for any ACP agent) holds its
// adapter;
// New picks one.
type Adapter interface {
	// Type is the agent's type; Name its name in messages (Claude).
	Type() protocol.AgentType
	Name() string
	// Caps is what the agent supports.
	Caps() Capabilities

	// Argv is the command line of a process for one task, and Stdin
	// what that process reads on its stdin.
	Argv(inv Invocation) []string
	Stdin(inv Invocation) []byte
	// PersistentArgv is the command line of a process that reads its
	// messages from stdin, across tasks.
	PersistentArgv(inv Invocation) []string
	// Parser reads the output of a process for one task.
	Parser() Parser
	// Input is the control channel's dialect and the output parser of a
	// process for inv's session (inv.ResumeID; "": a new one), working in
	// inv's directory (a git task's worktree, else the workspace).
	Input(inv Invocation) (Dialect, Parser)
	// WithContext is inv for a new session that carries the project's
	// context section (in its system prompt, or in its prompt).
	WithContext(inv Invocation, section string) Invocation

	// Route is how the agent reaches the model API: through the wrapper's
	// proxy (upstream), or by itself. getenv reads the wrapper's
	// environment.
	Route(getenv func(string) string) ModelRoute
	// Env is what the agent's environment gets from its adapter: the
	// model API (api is the proxy, empty when there is none), the wait
	// for its MCP servers, the CLI's own settings.
	Env(api ModelAPI) []string
	// KeepsEnv reports whether the agent gets the wrapper's variable
	// name, which the wrapper otherwise keeps to itself (its login to its
	// vendor's service).
	KeepsEnv(name string) bool
	// InstructionsFile is the file in the workspace the agent reads its
	// instructions from (INSTRUCTIONS).
	InstructionsFile() string
	// Setup writes the agent's configuration files: its MCP servers, its
	// permission hooks, its model settings. home is the agent's HOME.
	Setup(home string, api ModelAPI) error

	// CheckInit is the runner's check of the agent's init line (Spec.Check):
	// MCP_UNAVAILABLE when an MCP server is missing, nil otherwise.
	CheckInit(ev Event) *protocol.Error
	// CheckOutcome turns the outcome of a run that the agent refused to
	// start for a missing MCP server into an abort; any other outcome is
	// returned as it is.
	CheckOutcome(o Outcome) Outcome
	// Model is the model the agent's calls are priced by: the model of
	// its init line (nil: none seen), else the configured one.
	Model(init *Init) string
}

// Capabilities is what an agent supports: the wrapper asks these instead
// of the agent's type.
type Capabilities struct {
	// ReportsCost: its result carries its cost. Otherwise the wrapper
	// estimates the cost from the model calls its proxy meters, and
	// guards the task's max_budget_usd live from that estimate.
	ReportsCost bool
	// BudgetFlag: a task's max_budget_usd is a flag of its process, so a
	// task with one runs in a process of its own.
	BudgetFlag bool
	// Approvals: a persistent process asks on its control channel before
	// a tool call its rules do not allow (AGENT_APPROVAL).
	Approvals bool
	// NoResume says why a session cannot be resumed here for a next turn
	// (a steering message that came too late for its turn waits for
	// one); "" when it can.
	NoResume string
	// OpensSession: a persistent process opens its session on its input
	// before it takes a message.
	OpensSession bool
	// OneShotMCP: the check of the MCP servers reads a process for one
	// task, so a worker with MCP servers runs one process per task.
	OneShotMCP bool
	// JSONSchema: the CLI takes the stop output's JSON schema.
	JSONSchema bool
	// NoPersistent says why the agent has no persistent process
	// (AGENT_PERSISTENT); "" when it has one.
	NoPersistent string
	// NoMCPCheck says why a missing MCP server of the spec is not found
	// at start (no MCP_UNAVAILABLE); "" when it is.
	NoMCPCheck string
	// Converses: the agent takes its prompt on a control channel even for
	// one task (ACP): a process of its own is run as a persistent process
	// for one message (Spec.Converse), which can ask for approvals.
	Converses bool
}

// Invocation is one agent run's command line.
type Invocation struct {
	Prompt   string
	ResumeID string // continue this session; "" for a new one
	Extra    string // appended to the system prompt after Settings.SystemPrompt
	// MaxBudgetUSD is the task's max_budget_usd, for an agent that takes
	// it as a flag (Capabilities.BudgetFlag).
	MaxBudgetUSD float64
	// Dir is where the task runs when it is not the workspace (a git
	// task's worktree), for an agent whose command line names its
	// directory; "": Settings.Workspace.
	Dir string
}

// dir is the directory inv runs in: Dir, else the workspace.
func (s Settings) dir(inv Invocation) string {
	if inv.Dir != "" {
		return inv.Dir
	}
	return s.Workspace
}

// ModelAPI is the wrapper's model API proxy as the agent sees it: its
// base URL and token.
type ModelAPI struct{ URL, Token string }

// ModelRoute is how the agent reaches the model API.
type ModelRoute struct {
	// Proxied: through the wrapper's proxy, which forwards to Upstream
	// ("" for the proxy's default, the Anthropic API).
	Proxied  bool
	Upstream string
	// Direct says which service the agent talks to by itself when it is
	// not proxied.
	Direct string
	// Credential, when set, is what the proxy sends upstream in place of
	// the wrapper's Anthropic credentials (ANTHROPIC_API_KEY,
	// ANTHROPIC_AUTH_TOKEN): another vendor's key.
	Credential *Credential
}

// Credential is a model API credential the proxy sends upstream: APIKey
// as x-api-key, else AuthToken as a bearer token.
type Credential struct{ APIKey, AuthToken string }

// Settings are what an adapter is built from: the worker's configuration
// of its agent.
type Settings struct {
	Bin       string   // the executable
	Args      []string // extra flags, last on the command line
	Model     string   // the model (AGENT_MODEL)
	Workspace string
	PTY       bool // the agent runs on a pseudo-terminal
	// SystemPrompt is what every run appends to the agent's system
	// prompt, before an invocation's Extra.
	SystemPrompt    string
	AllowedCommands protocol.AllowedCommands
	// SkipPermissions: with every command allowed, the CLI's own mode
	// that asks nothing.
	SkipPermissions bool
	JSONSchema      bool // hand the agent the stop output's schema
	Approval        bool // AGENT_APPROVAL
	MCPServers      []protocol.MCPServer
	MCPTimeout      time.Duration
	// BaseURL (DROID_BASE_URL) is an Anthropic-compatible API Droid's
	// custom model points at.
	BaseURL string
	// RuntimeDir holds the files the wrapper writes for the agent at run
	// time (an MCP configuration, a hook's settings).
	RuntimeDir string
	SelfPath   string // the wrapper's executable
	// Command is an ACP agent's command line (AGENT_COMMAND).
	Command []string
}

// systemPrompt is what inv's run appends to the agent's system prompt.
func (s Settings) systemPrompt(inv Invocation) string {
	if inv.Extra != "" {
		return s.SystemPrompt + "\n" + inv.Extra
	}
	return s.SystemPrompt
}

// stdin is a run's stdin: the prompt, which never goes on the command
// line (one argument is limited to 128 KiB, a prompt may be
// protocol.MaxPromptBytes). On a pty stdin is the terminal: the prompt
// stays in argv, so a prompt there is limited to 128 KiB.
func (s Settings) stdin(inv Invocation) []byte {
	if s.PTY {
		return nil
	}
	return []byte(inv.Prompt)
}

// adapters are the agents' adapters, by type; each adapter's file adds
// its own.
var adapters = map[protocol.AgentType]func(Settings) Adapter{}

func register(t protocol.AgentType, newAdapter func(Settings) Adapter) { adapters[t] = newAdapter }

// New returns the adapter of the agent type t: the one place that picks
// one.
func New(t protocol.AgentType, s Settings) (Adapter, error) {
	newAdapter, ok := adapters[t]
	if !ok {
		return nil, fmt.Errorf("agent: no adapter for agent type %q", t)
	}
	s.Args, s.Command = slices.Clone(s.Args), slices.Clone(s.Command)
	return newAdapter(s), nil
}
