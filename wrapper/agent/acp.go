package agent

import (
	"slices"

	"github.com/agentvisor/agentvisor/protocol"
)

// The adapter of any agent that speaks the Agent Client Protocol
// (AGENT_TYPE=acp), run as AGENT_COMMAND (then AGENT_ARGS): the wrapper
// is its ACP client (ACPClient), for a task in a process of its own
// (Spec.Converse) or in the persistent process across a long-lived
// worker's tasks.
//
// The wrapper knows nothing else of the agent: it configures neither its
// model nor its permission mode. So:
//   - the model API: the agent reaches it by itself, with the credentials
//     given to it under its own variable names (the wrapper keeps
//     ANTHROPIC_*, OPENAI_* and its other secrets to itself): no proxy
//     meters its calls, and a task's max_budget_usd is not enforced;
//   - ALLOWED_COMMANDS is enforced on what the agent asks
//     (session/request_permission): an agent set to run commands without
//     asking is not governed by it;
//   - its system prompt: ACP has none, so the wrapper's section goes
//     before the first prompt of a new session;
//   - MCP servers go in session/new and session/load, but ACP reports no
//     server's status: a missing one is not detected at start.
//
// An agent the wrapper does configure (OpenCode, Qwen Code) embeds acp
// with no preamble: its system prompt carries the wrapper's section.
type acp struct {
	s Settings
	// preamble goes before the first prompt of a new session.
	preamble string
}

func init() {
	register(protocol.AgentACP, func(s Settings) Adapter { return acp{s: s, preamble: s.SystemPrompt} })
}

func (acp) Type() protocol.AgentType { return protocol.AgentACP }
func (acp) Name() string             { return "ACP agent" }

// acpCaps are what every ACP agent supports here.
var acpCaps = Capabilities{Converses: true, Approvals: true, OpensSession: true,
	NoMCPCheck: "ACP reports no MCP server's status: the agent goes on without a server that did not start"}

func (acp) Caps() Capabilities { return acpCaps }

// Argv is AGENT_COMMAND, then AGENT_ARGS.
func (a acp) Argv(Invocation) []string { return slices.Concat(a.s.Command, a.s.Args) }

// Stdin is the prompt, which goes as the session's message.
func (acp) Stdin(inv Invocation) []byte { return []byte(inv.Prompt) }

func (a acp) PersistentArgv(inv Invocation) []string { return a.Argv(inv) }

// Parser: a client for a new session (Spec.Converse gives each process its
// own).
func (a acp) Parser() Parser { return NewACPClient(a.session(Invocation{}), "") }

// Input is one ACPClient, dialect and parser.
func (a acp) Input(inv Invocation) (Dialect, Parser) {
	c := NewACPClient(a.session(inv), inv.ResumeID)
	return c, c
}

func (a acp) session(inv Invocation) ACPSession {
	return ACPSession{Cwd: a.s.dir(inv), MCPServers: a.s.MCPServers, Allowed: a.s.AllowedCommands, Approval: a.s.Approval,
		Preamble: a.preamble}
}

// WithContext puts the project's context in the prompt.
func (acp) WithContext(inv Invocation, section string) Invocation {
	inv.Prompt = section + "\n\n# Task\n" + inv.Prompt
	return inv
}

func (acp) Route(func(string) string) ModelRoute {
	return ModelRoute{Direct: "an ACP agent (AGENT_COMMAND) reaches its model API by itself"}
}

func (acp) Env(ModelAPI) []string        { return nil }
func (acp) KeepsEnv(string) bool         { return false }
func (acp) InstructionsFile() string     { return "AGENTS.md" }
func (acp) Setup(string, ModelAPI) error { return nil }

func (acp) CheckInit(Event) *protocol.Error { return nil }
func (acp) CheckOutcome(o Outcome) Outcome  { return o }

// Model: the session's model as the agent names it, else AGENT_MODEL.
func (a acp) Model(init *Init) string {
	if init != nil && init.Model != "" {
		return init.Model
	}
	return a.s.Model
}
