package worker

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// recoverEntry answers the entry whose handling panicked with p. It is
// guarded itself: a second panic while answering leaves the entry
// acknowledged and the worker idle, and is logged.
func (r *router) recoverEntry(src taskSource, e *rdb.Entry, p any, stack []byte) {
	log := r.log.With("entry", e.ID)
	log.Error("the handling of an input entry panicked; answering it and serving on", "panic", fmt.Sprint(p), "stack", string(stack))
	defer func() {
		if p2 := recover(); p2 != nil {
			log.Error("answering the panicked entry panicked too; acknowledging it", "panic", fmt.Sprint(p2), "stack", string(debug.Stack()))
			r.endPanicked(src)
		}
	}()
	msg := fmt.Sprintf("the wrapper failed while handling the task (%v); the worker serves on", p)
	if cur := r.state.current(); cur != nil && cur.src.entryID == e.ID {
		o := r.outputs.unrun(cur.task, protocol.NewError(protocol.CodeInternalError, "%s", msg))
		o.ProjectID, o.Answers, o.Attempt = cur.task.Project(), cur.task.Answers, cur.attempt
		r.tasks.finishPanicked(log, src, e, cur, o)
		return
	}
	data, _ := protocol.EntryData(e.Values)
	task, err := protocol.DecodeTask(data)
	if err != nil || task.RequestID == "" {
		// Not a task (a cancel, a message, a permission reply): nothing
		// awaits an answer to it.
		r.endPanicked(src)
		return
	}
	o := r.outputs.unrun(task, protocol.NewError(protocol.CodeInternalError, "%s", msg))
	r.pub.storeOutput(log, src, o, nil, nil)
	r.status.requestPause(task.RequestID, task.TaskID, "stop_output:"+string(o.Status))
}

// endPanicked acknowledges a panicked entry and leaves the worker idle
// (unless it is stopping), with no task in flight.
func (r *router) endPanicked(src taskSource) {
	r.pub.ack(src)
	if r.state.current() != nil {
		_, _ = r.state.end("panic recovered")
	}
}

// encodeOutput returns o and its document. An o that does not validate
// (what the agent gave made a field no output may have) is replaced by a
// failed output carrying none of it, with INTERNAL_ERROR: the task is
// answered all the same.
func encodeOutput(log *slog.Logger, redact *Redactor, now func() time.Time, o protocol.Output) (protocol.Output, []byte, error) {
	doc, err := o.Encode()
	if err == nil {
		return o, doc, nil
	}
	log.Error("the task's output does not validate; publishing it failed", "err", err)
	o = protocol.Output{RequestID: o.RequestID, TaskID: o.TaskID, ProjectID: o.ProjectID, WorkerID: o.WorkerID,
		AgentType: o.AgentType, Status: protocol.StatusFailed, Attempt: max(o.Attempt, 0), Timestamp: o.Timestamp,
		Error: protocol.NewError(protocol.CodeInternalError, "the task's output did not validate: %s", redact.Redact(err.Error()))}
	if o.Timestamp.IsZero() {
		o.Timestamp = now()
	}
	doc, err = o.Encode()
	return o, doc, err
}
