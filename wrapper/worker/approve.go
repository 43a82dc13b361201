package worker

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// Approval (AGENT_APPROVAL), for an agent that asks (Capabilities.Approvals:
// Claude): the persistent process runs with --permission-mode default and
// --permission-prompt-tool stdio, so that a tool call its rules
// (ALLOWED_COMMANDS) do not allow becomes a can_use_tool control request
// on its stdout instead of a refusal. The wrapper publishes it as a
// permission_request on the task's output stream, and answers the agent
// with the owner's permission_reply, or denies it after APPROVAL_TIMEOUT.

// approvals are the permissions asked and not answered yet.
type approvals struct {
	pub      *publisher
	log      *slog.Logger
	redact   *Redactor
	now      func() time.Time
	workerID string
	timeout  time.Duration

	mu      sync.Mutex // guards pending
	pending map[string]*pendingPermission
}

// pendingPermission is a permission asked and not answered yet.
type pendingPermission struct {
	cur    *current
	ask    agent.PermissionAsk
	answer func(agent.PermissionAsk, bool, string) error
	timer  *time.Timer
}

// ask publishes the agent's question and arms its timeout; called from
// the task's agent events.
func (a *approvals) ask(cur *current, ask agent.PermissionAsk) {
	answer := cur.steer.answerer()
	if answer == nil { // not the persistent process: nobody can answer it
		return
	}
	id := "perm-" + newToken()[:16]
	p := &pendingPermission{cur: cur, ask: ask, answer: answer}
	a.mu.Lock()
	if a.pending == nil {
		a.pending = map[string]*pendingPermission{}
	}
	a.pending[id] = p
	p.timer = time.AfterFunc(a.timeout, func() {
		a.resolve(cur.task.RequestID, id, false, fmt.Sprintf("no answer within %v: denied", a.timeout))
	})
	a.mu.Unlock()
	req := protocol.PermissionRequest{WorkerID: a.workerID, RequestID: cur.task.RequestID, TaskID: cur.task.TaskID,
		PermissionID: id, Tool: ask.Tool, Input: a.redact.RedactJSON(ask.Input), TimeoutMS: a.timeout.Milliseconds(), Timestamp: a.now()}
	if len(req.Input) == 0 {
		req.Input = []byte(`{}`)
	}
	doc, err := req.Encode()
	if err != nil {
		a.log.Error("encode permission request", "err", err)
		return
	}
	a.log.Info("permission asked", "request_id", cur.task.RequestID, "permission_id", id, "tool", ask.Tool)
	a.pub.entry("permission_request", cur.src.output, doc)
}

// resolve answers a pending permission of the task requestID, once: the
// owner's reply or the timeout, whichever comes first.
func (a *approvals) resolve(requestID, id string, allow bool, message string) {
	a.mu.Lock()
	p := a.pending[id]
	if p == nil || p.cur.task.RequestID != requestID {
		a.mu.Unlock()
		return
	}
	delete(a.pending, id)
	p.timer.Stop()
	a.mu.Unlock()
	if !allow && message == "" {
		message = "denied by the task's owner"
	}
	if err := p.answer(p.ask, allow, message); err != nil {
		a.log.Warn("permission answer not delivered", "permission_id", id, "err", err)
	}
	verdict := "allowed"
	if !allow {
		verdict = "denied: " + message
	}
	a.pub.progress(p.cur, fmt.Sprintf("permission %s (%s) %s", id, p.ask.Tool, verdict), "")
}
