package agent

import (
	"encoding/json"
	"sync"

	"github.com/agentvisor/agentvisor/protocol"
)

// The answer to an agent that asks its client whether it may run a shell
// command (an ACP agent's session/request_permission, Codex's
// app-server approval requests), which the wrapper decides the same way
// for every such agent.

// commandRules is how a client decides a shell command: by ALLOWED_COMMANDS,
// and with AGENT_APPROVAL by the task's owner for what the list refuses.
type commandRules struct {
	allowed  protocol.AllowedCommands
	approval bool
}

// decide answers the request id to run command: allow (the answer that
// lets it run) when the list allows it; else, with approval, an
// Event.Permission for the task's owner, the request kept in asks with v
// until Answer; else reject, and the refusal reported (Event.Denied).
func decide[T any](r commandRules, asks *pendingAsks[T], id, command string, v T, allow, reject []byte) []Event {
	if r.allowed.AllowsShell(command) {
		return []Event{{Write: allow}}
	}
	input, _ := json.Marshal(map[string]string{"command": command})
	if r.approval {
		asks.put(id, v)
		return []Event{{Permission: &PermissionAsk{ID: id, Tool: "Bash", Input: input}}}
	}
	return []Event{{Write: reject}, {Denied: &Denial{Tool: "Bash", Input: input}}}
}

// pendingAsks are an agent's requests waiting for the task's owner, by
// request id (raw JSON): each is answered once, by the owner or when the
// turn ends. Safe from any goroutine (the reading goroutine puts, the
// task loop and the owner's answer take).
type pendingAsks[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

func (p *pendingAsks[T]) put(id string, v T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]T{}
	}
	p.m[id] = v
}

// take removes the request id; ok is false when it no longer waits.
func (p *pendingAsks[T]) take(id string) (v T, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok = p.m[id]
	delete(p.m, id)
	return v, ok
}

// takeAll removes every request, and returns their ids.
func (p *pendingAsks[T]) takeAll() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.m))
	for id := range p.m {
		ids = append(ids, id)
	}
	clear(p.m)
	return ids
}
