package worker

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// router is the second stage of the pipeline: it hands each entry the
// input read through the group to what its type is for, the task runner
// (task.go) above all; and it is the boundary where a panic in the
// handling of one entry ends that entry, not PID 1 (recover.go).
type router struct {
	routerParams
}

// routerParams are what the router is built from: its
// collaborators and settings, none of them the Worker.
type routerParams struct {
	pub      *publisher
	status   *statusReporter
	state    *workerState
	controls *controls
	adopter  *adopter
	affinity *affinity
	tasks    *tasks
	outputs  outputs
	log      *slog.Logger
	now      func() time.Time
	workerID string
}

func newRouter(p routerParams) *router { return &router{routerParams: p} }

// serve handles one input entry. The wrapper is PID 1: a panic in the
// handling of one entry (a bug that some agent output reaches) must not
// end the container, its reaper and its heartbeat with it. It ends that
// entry instead: a task is answered failed with INTERNAL_ERROR (not
// retryable: the same task would take the same path), its entry is
// acknowledged, the worker becomes idle and serves the next entry.
func (r *router) serve(ctx context.Context, src taskSource, e *rdb.Entry) {
	defer func() {
		if p := recover(); p != nil {
			r.recoverEntry(src, e, p, debug.Stack())
		}
	}()
	r.route(ctx, src, e)
}

// route hands an entry read through the group to what its type is for:
// a task runs (task.go); a cancel, a steering message or a permission
// reply is noted (controls) and acknowledged, and the worker, idle, asks
// to be paused again (the entry kept it awake); an adopt document may
// make this wrapper another worker (adopt.go). An entry that cannot be
// decoded is answered INVALID_TASK (reject).
func (r *router) route(ctx context.Context, src taskSource, e *rdb.Entry) {
	data, err := protocol.EntryData(e.Values)
	if err != nil {
		r.reject(src, data, err)
		return
	}
	_, typ, _ := protocol.PeekType(data)
	if typ == protocol.TypeAdopt {
		r.adopter.adopt(ctx, data)
		r.pub.ack(src)
		return
	}
	if isControl(typ) {
		requestID, err := r.controls.note(e.ID, typ, data)
		if err != nil {
			r.reject(src, data, err)
			return
		}
		r.pub.ack(src)
		r.status.requestPause(requestID, "", pauseReasons[typ])
		return
	}
	task, err := protocol.DecodeTask(data)
	if err != nil {
		r.reject(src, data, err)
		return
	}
	if r.affinity.handOff(ctx, src, task) {
		return
	}
	r.tasks.run(ctx, src, e, task)
}

// pauseReasons are the reasons of the pause asked after a control entry.
var pauseReasons = map[protocol.Type]string{protocol.TypeCancel: "cancel_read", protocol.TypeMessage: "message_read",
	protocol.TypePermissionReply: "permission_reply_read"}

// reject answers a task entry that could not be decoded: a failed output
// with INVALID_TASK under the request id invalid-<entry id>, and the entry
// is acknowledged. A document that failed validation proves no request id:
// the one it claims is only echoed in the message, so that it can neither
// publish nor suppress the output of the run that really has that id
// (which may be running on another worker).
func (r *router) reject(src taskSource, data []byte, cause error) {
	reqID := "invalid-" + src.entryID
	msg := r.outputs.redact.Redact(cause.Error())
	if claimed := gjson.GetBytes(data, "request_id").String(); claimed != "" {
		msg += "; the entry's request_id was " + cutUTF8(r.outputs.redact.Redact(claimed), 256)
	}
	task := protocol.Task{RequestID: reqID}
	o := r.outputs.unrun(task, protocol.NewError(protocol.CodeInvalidTask, "%s", msg))
	log := r.log.With("request_id", reqID)
	log.Warn("invalid task", "entry", src.entryID, "err", msg)
	now := r.now()
	run := protocol.NewRun(reqID, o.TaskID, r.workerID, "", now)
	_ = run.Fail(protocol.CodeInvalidTask, msg, now)
	r.pub.storeOutput(log, src, o, run.Hash(), nil)
	r.pub.lifecycle(protocol.EventTaskFailed, reqID, o.TaskID, map[string]any{"code": protocol.CodeInvalidTask})
	r.status.requestPause(reqID, o.TaskID, "stop_output:"+string(o.Status))
}

// controls are where a cancel, a steering message or a permission reply
// goes, whichever way it was seen: read in its turn (route), followed
// while a task runs, or looked ahead of a task's entry (input.go).
type controls struct {
	cancels   *cancels
	steering  *steering
	approvals *approvals
}

// isControl reports whether typ is a control document's.
func isControl(typ protocol.Type) bool {
	return typ == protocol.TypeCancel || typ == protocol.TypeMessage || typ == protocol.TypePermissionReply
}

// note notes the cancel, steering message or permission reply data (of
// type typ), from the entry entryID: the cancel interrupts its task or
// waits for it (cancel.go), the message goes to its task or waits
// (steer.go), the reply answers its permission (approve.go). It returns
// the request the document names.
func (c *controls) note(entryID string, typ protocol.Type, data []byte) (string, error) {
	switch typ {
	case protocol.TypeCancel:
		cn, err := protocol.DecodeCancel(data)
		if err == nil {
			c.cancels.note(cn)
		}
		return cn.RequestID, err
	case protocol.TypeMessage:
		m, err := protocol.DecodeMessage(data)
		if err == nil {
			c.steering.note(entryID, m)
		}
		return m.RequestID, err
	default:
		r, err := protocol.DecodePermissionReply(data)
		if err == nil {
			c.approvals.resolve(r.RequestID, r.PermissionID, r.Allow, r.Message)
		}
		return r.RequestID, err
	}
}

// entry notes the control document an input entry seen outside the group
// carries, if it is one.
func (c *controls) entry(e rdb.Entry) {
	data, err := protocol.EntryData(e.Values)
	if err != nil {
		return
	}
	if _, typ, _ := protocol.PeekType(data); isControl(typ) {
		_, _ = c.note(e.ID, typ, data)
	}
}
