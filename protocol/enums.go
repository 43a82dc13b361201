package protocol

import (
	"fmt"
	"strings"
)

// AgentType names the coding agent a worker runs.
type AgentType string

const (
	AgentClaude AgentType = "claude" // Claude Code
	AgentDroid  AgentType = "droid"  // Factory Droid
	AgentCodex  AgentType = "codex"  // OpenAI's Codex CLI
	// AgentOpenCode is OpenCode (sst/opencode), driven over ACP.
	AgentOpenCode AgentType = "opencode"
	// AgentQwen is Qwen Code (QwenLM/qwen-code), driven over ACP.
	AgentQwen AgentType = "qwen"
	// AgentACP is any agent that speaks the Agent Client Protocol, run
	// with the worker's AGENT_COMMAND.
	AgentACP AgentType = "acp"
)

// AgentTypes lists every agent type, in a stable order.
var AgentTypes = []AgentType{AgentClaude, AgentDroid, AgentCodex, AgentOpenCode, AgentQwen, AgentACP}

// Valid reports whether a is a known agent type.
func (a AgentType) Valid() bool {
	switch a {
	case AgentClaude, AgentDroid, AgentCodex, AgentOpenCode, AgentQwen, AgentACP:
		return true
	}
	return false
}

// ParseAgentType accepts the canonical names and the seeds' spellings
// (CLAUDE, FACTORY), case-insensitively, and returns the canonical name.
func ParseAgentType(s string) (AgentType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "claude", "claude-code", "claude_code":
		return AgentClaude, nil
	case "droid", "factory", "factory-droid", "factory_droid":
		return AgentDroid, nil
	case "codex", "openai-codex", "openai_codex":
		return AgentCodex, nil
	case "opencode", "open-code", "opencode-ai":
		return AgentOpenCode, nil
	case "qwen", "qwen-code", "qwen_code":
		return AgentQwen, nil
	case "acp":
		return AgentACP, nil
	}
	return "", fmt.Errorf("protocol: unknown agent type %q (want claude, droid, codex, opencode, qwen or acp)", s)
}

// Kind says which streams a worker reads.
type Kind string

const (
	// KindLongLived workers read and write their own streams
	// (worker:{id}:input, worker:{id}:output), e.g. one per chat user.
	KindLongLived Kind = "long_lived"
	// KindDeveloper workers share worker:developer:input through a consumer
	// group and write worker:developer:output.
	KindDeveloper Kind = "developer"
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == KindLongLived || k == KindDeveloper }

// ParseKind accepts the canonical names and a few spellings
// ("long-lived", "po"), case-insensitively.
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "long_lived", "long-lived", "longlived", "po":
		return KindLongLived, nil
	case "developer", "dev":
		return KindDeveloper, nil
	}
	return "", fmt.Errorf("protocol: unknown worker kind %q (want long_lived or developer)", s)
}

// OutputStatus is how a task ended, as the agent (or the wrapper on its
// behalf) reported it.
type OutputStatus string

const (
	StatusComplete OutputStatus = "complete"
	StatusBlocked  OutputStatus = "blocked"
	StatusFailed   OutputStatus = "failed"
	// StatusCancelled: a cancel document ended the task before it ended
	// by itself.
	StatusCancelled OutputStatus = "cancelled"
)

// ValidStop reports whether s may end a stop output: complete, blocked or
// failed. cancelled is the runtime's word for a task a cancel ended, never
// the agent's.
func (s OutputStatus) ValidStop() bool {
	return s == StatusComplete || s == StatusBlocked || s == StatusFailed
}

// Valid reports whether s is one of complete, blocked, failed, cancelled.
func (s OutputStatus) Valid() bool {
	return s == StatusComplete || s == StatusBlocked || s == StatusFailed || s == StatusCancelled
}

// Runtime is the sandbox a worker's container runs in.
type Runtime string

const (
	// RuntimeRunc: the engine's usual runtime (namespaces, cgroups,
	// seccomp over the host's kernel).
	RuntimeRunc Runtime = "runc"
	// RuntimeGVisor: gVisor (runsc), a kernel of its own in user space
	// between the worker and the host's kernel. Sealed workers only: the
	// sandbox has loopback and the gateway's sockets, no network stack
	// to the outside.
	RuntimeGVisor Runtime = "gvisor"
)

// Valid reports whether r is a known runtime.
func (r Runtime) Valid() bool { return r == RuntimeRunc || r == RuntimeGVisor }
