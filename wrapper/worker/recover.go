package worker

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// serve handles one input entry. The wrapper is PID 1: a panic in the
// handling of one entry (a bug that some agent output reaches) must not
// end the container, its reaper and its heartbeat with it. It ends that
// entry instead: a task is answered failed with INTERNAL_ERROR (not
// retryable: the same task would take the same path), its entry is
// acknowledged, the worker becomes idle and serves the next entry.
func (w *Worker) serve(ctx context.Context, stream, group string, e *rdb.Entry) {
	defer func() {
		if p := recover(); p != nil {
			w.recoverEntry(stream, group, e, p, debug.Stack())
		}
	}()
	w.handle(ctx, stream, group, e)
}

// recoverEntry answers the entry whose handling panicked with p. It is
// guarded itself: a second panic while answering leaves the entry
// acknowledged and the worker idle, and is logged.
func (w *Worker) recoverEntry(stream, group string, e *rdb.Entry, p any, stack []byte) {
	log := w.log.With("entry", e.ID)
	log.Error("the handling of an input entry panicked; answering it and serving on", "panic", fmt.Sprint(p), "stack", string(stack))
	src := taskSource{stream: stream, group: group, entryID: e.ID, output: w.cfg.Keys.OutputFor(w.cfg.Kind, w.cfg.WorkerID)}
	defer func() {
		if p2 := recover(); p2 != nil {
			log.Error("answering the panicked entry panicked too; acknowledging it", "panic", fmt.Sprint(p2), "stack", string(debug.Stack()))
			w.endPanicked(src)
		}
	}()
	w.mu.Lock()
	cur := w.cur
	w.mu.Unlock()
	msg := fmt.Sprintf("the wrapper failed while handling the task (%v); the worker serves on", p)
	if cur != nil && cur.src.entryID == e.ID {
		o := w.unrunOutput(cur.task, protocol.NewError(protocol.CodeInternalError, "%s", msg))
		o.ProjectID, o.Answers, o.Attempt = cur.task.Project(), cur.task.Answers, cur.attempt
		w.finish(log, cur, o, nil)
		return
	}
	data, _ := protocol.EntryData(e.Values)
	task, err := protocol.DecodeTask(data)
	if err != nil || task.RequestID == "" {
		// Not a task (a cancel, a message, a permission reply): nothing
		// awaits an answer to it.
		w.endPanicked(src)
		return
	}
	o := w.unrunOutput(task, protocol.NewError(protocol.CodeInternalError, "%s", msg))
	w.storeOutput(log, src, o, nil, nil)
	w.requestPause(task.RequestID, task.TaskID, "stop_output:"+string(o.Status))
}

// endPanicked acknowledges a panicked entry and leaves the worker idle
// (unless it is stopping), with no task in flight.
func (w *Worker) endPanicked(src taskSource) {
	_, _ = store(w.pub, "ack "+src.entryID, func(c context.Context) (struct{}, error) {
		return struct{}{}, w.rdb.Ack(c, src.stream, src.group, src.entryID)
	})
	w.mu.Lock()
	w.cur = nil
	if !w.stopping && w.machine.State != protocol.WorkerIdle {
		_, _ = w.machine.Transition(protocol.WorkerIdle, "panic recovered", w.now())
	}
	w.mu.Unlock()
}
