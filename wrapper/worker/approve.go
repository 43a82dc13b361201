package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Approval (AGENT_APPROVAL): the persistent Claude runs with
// --permission-mode default and --permission-prompt-tool stdio, so that a
// tool call its rules (ALLOWED_COMMANDS) do not allow becomes a
// can_use_tool control request on its stdout instead of a refusal. The
// wrapper publishes it as a permission_request on the task's output
// stream, and answers Claude with the owner's permission_reply, or denies
// it after APPROVAL_TIMEOUT.

// pendingPermission is a permission asked and not answered yet.
type pendingPermission struct {
	cur    *current
	ask    agent.PermissionAsk
	answer func(agent.PermissionAsk, bool, string) error
	timer  *time.Timer
}

// onPermission publishes Claude's question and arms its timeout; called
// from the task's agent events.
func (w *Worker) onPermission(cur *current, ask agent.PermissionAsk) {
	w.mu.Lock()
	answer := cur.steer.answer
	if answer == nil { // not the persistent process: nobody can answer it
		w.mu.Unlock()
		return
	}
	id := "perm-" + newToken()[:16]
	p := &pendingPermission{cur: cur, ask: ask, answer: answer}
	if w.permissions == nil {
		w.permissions = map[string]*pendingPermission{}
	}
	w.permissions[id] = p
	timeout := w.cfg.ApprovalTimeout
	p.timer = time.AfterFunc(timeout, func() {
		w.resolvePermission(cur.task.RequestID, id, false, fmt.Sprintf("no answer within %v: denied", timeout))
	})
	w.mu.Unlock()
	req := protocol.PermissionRequest{WorkerID: w.cfg.WorkerID, RequestID: cur.task.RequestID, TaskID: cur.task.TaskID,
		PermissionID: id, Tool: ask.Tool, Input: w.redact.RedactJSON(ask.Input), TimeoutMS: timeout.Milliseconds(), Timestamp: w.now()}
	if len(req.Input) == 0 {
		req.Input = []byte(`{}`)
	}
	doc, err := req.Encode()
	if err != nil {
		w.log.Error("encode permission request", "err", err)
		return
	}
	w.log.Info("permission asked", "request_id", cur.task.RequestID, "permission_id", id, "tool", ask.Tool)
	w.pub.entry("permission_request", cur.src.output, doc)
}

// resolvePermission answers a pending permission of the task requestID,
// once: the owner's reply or the timeout, whichever comes first.
func (w *Worker) resolvePermission(requestID, id string, allow bool, message string) {
	w.mu.Lock()
	p := w.permissions[id]
	if p == nil || p.cur.task.RequestID != requestID {
		w.mu.Unlock()
		return
	}
	delete(w.permissions, id)
	p.timer.Stop()
	w.mu.Unlock()
	if !allow && message == "" {
		message = "denied by the task's owner"
	}
	if err := p.answer(p.ask, allow, message); err != nil {
		w.log.Warn("permission answer not delivered", "permission_id", id, "err", err)
	}
	verdict := "allowed"
	if !allow {
		verdict = "denied: " + message
	}
	w.pushProgress(p.cur, fmt.Sprintf("permission %s (%s) %s", id, p.ask.Tool, verdict), nil, "", "")
}

// handlePermissionReplyEntry takes a permission reply read through the
// group in its turn (the follower has usually answered it already).
func (w *Worker) handlePermissionReplyEntry(src taskSource, e *rdb.Entry, data []byte) {
	r, err := protocol.DecodePermissionReply(data)
	if err != nil {
		w.reject(src, data, err)
		return
	}
	w.resolvePermission(r.RequestID, r.PermissionID, r.Allow, r.Message)
	_, _ = store(w.pub, "ack "+e.ID, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, w.rdb.Ack(ctx, src.stream, src.group, e.ID)
	})
	w.requestPause(r.RequestID, "", "permission_reply_read")
}
