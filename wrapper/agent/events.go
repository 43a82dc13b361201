// Package agent runs a coding agent (Claude Code, Factory Droid, Codex,
// OpenCode, Qwen Code or any agent that speaks the Agent Client Protocol)
// as a subprocess, one process per task (Run) or one kept across messages
// (Persistent), and turns its JSON output into normalised events: the
// session, each API call's usage, tool calls, API retries and errors, and
// the final result. One supervisor (supervise.go) watches either kind of
// process: stall, timeout, cancel, interrupt, and the drain of its output.
// Each CLI has one adapter (Adapter; claude.go, droid.go, codex.go,
// opencode.go, qwen.go, acp.go): its command lines, its parser, its control
// channel's dialect, how permissions and MCP servers are given to it, its
// model environment and what it supports; New is the one place that
// picks one. Judge turns an outcome into one status.
package agent

import (
	"encoding/json"

	"github.com/agentvisor/agentvisor/protocol"
)

// Event is one normalised fact from an agent's output stream. Exactly one
// field is set.
type Event struct {
	Init     *Init
	Turn     *Turn
	ToolCall *ToolCall
	Retry    *APIRetry
	APIError *APIError
	Result   *Result
	Denied   *Denial
	Control  *ControlResponse
	// Replay is Claude's echo of a user message it took from its
	// stream-json input (--replay-user-messages): a persistent process's
	// task prompt, or a steering message.
	Replay bool
	// Permission is Claude asking, on its control channel
	// (--permission-prompt-tool stdio), whether it may make a tool call.
	Permission *PermissionAsk
	// Request is a request the agent made of its client (Droid's
	// JSON-RPC mode), which a persistent process answers with its
	// Dialect's Refuse.
	Request *AgentRequest
	// Write is what the parser answers the agent on its stdin (an ACP
	// client's answers to the agent's requests, its next request while
	// it opens a session): a persistent process writes it as it comes.
	Write []byte
	// Progress is a note of the agent's work the task's owner sees as a
	// progress event (an ACP agent's plans and tool calls).
	Progress *ProgressNote
}

// ProgressNote is one progress event's step and level ("" or warning).
type ProgressNote struct {
	Step  string
	Level string
}

// AgentRequest is a JSON-RPC request of the agent to its client.
type AgentRequest struct {
	ID     string // the request's id, as JSON
	Method string
}

// ControlResponse is the answer to a request written on a persistent
// agent's input that opens it: Claude's initialize control request,
// Droid's initialize_session or load_session.
type ControlResponse struct {
	RequestID string
	Subtype   string // success or error
	Error     string
	Code      int // the JSON-RPC error code (Droid); 0 otherwise
	// NotFound: the session to resume is not there (or the agent cannot
	// load one); Open gives ErrSessionNotFound.
	NotFound bool
}

// PermissionAsk is a can_use_tool control request of Claude: answer it with
// Persistent.AnswerPermission.
type PermissionAsk struct {
	ID    string // the control request's id
	Tool  string
	Input json.RawMessage
}

// Denial is a tool call the agent CLI refused by its permission rules
// (Claude's permission_denials).
type Denial struct {
	Tool  string
	Input json.RawMessage
}

// Init is the agent's first line: its session and model, and what it
// says of its MCP servers.
type Init struct {
	SessionID string
	Model     string
	// MCPServers is each MCP server's status (Claude's mcp_servers:
	// connected, failed, pending, ...); nil when the agent reports none.
	MCPServers []MCPServerStatus
	// Tools are the tools the agent offers the model (Droid's list, from
	// which its MCP servers' tools, <server>___<tool>, tell which of them
	// connected); nil for Claude.
	Tools []string
}

// MCPServerStatus is one MCP server as an agent's init line reports it.
type MCPServerStatus struct {
	Name   string
	Status string
}

// Turn is one API call's usage, as reported on an assistant message. The
// last Turn of a run gives the size of the session's context.
type Turn struct {
	MessageID string
	Usage     protocol.Usage
}

// ToolCall is a tool the agent called.
type ToolCall struct {
	Name  string
	Input json.RawMessage
}

// APIRetry is the agent retrying a failed model API call.
type APIRetry struct {
	Attempt    int
	MaxRetries int
	DelayMS    float64
	Status     int    // HTTP status of the failed call
	Error      string // the agent's word for it
}

// APIError is the agent's own word for a model API call that failed for
// good (Claude's "authentication_failed", "invalid_request", ...), from the
// message it shows in place of a reply.
type APIError struct {
	Kind string
}

// Result is the agent's final line.
type Result struct {
	Text             string
	StructuredOutput json.RawMessage // Claude with --json-schema; nil otherwise
	IsError          bool
	Subtype          string // Claude: success, error_max_turns, error_during_execution, ...
	APIErrorStatus   int    // 0 when none
	Usage            protocol.Usage
	CostUSD          float64
	Turns            int
	SessionID        string
	DurationMS       int64
	ContextWindow    int64 // the model's context window when the agent reports it; 0 otherwise
}

// Parser turns one line of an agent's output into events. Lines that are
// not JSON, or of a type it does not know, give none.
type Parser interface {
	ParseLine(line []byte) []Event
}
