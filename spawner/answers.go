package spawner

import (
	"context"
	"fmt"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// answers answers the tasks a retired worker held or had not read yet:
// each with an output of the retirement's code, or, for a task that asked
// for retries and has an attempt left, back on the input for the worker's
// next incarnation or its replacement (retries.go).
type answers struct {
	*env
	cfg *Config // Retry: the defaults of a task's retry policy (RETRY_ATTEMPTS, RETRY_BACKOFF_MS)
}

// answerHeld answers the tasks a retired worker held: the one its status
// names and every entry delivered to it and never acknowledged. A
// retryable developer task goes back to the queue; with a replacement
// coming, a long-lived worker's held tasks other than the one in flight
// are put back on its input, unread, for the replacement.
func (a *answers) answerHeld(ctx context.Context, id string, h map[string]string, kind protocol.Kind, inputs []string, group string, r retirement, replacing bool) error {
	inFlight := h[protocol.StatusFieldRequestID]
	answeredInFlight := false
	for _, input := range inputs {
		found, err := a.answerHeldOn(ctx, id, h, kind, input, group, r, replacing)
		if err != nil {
			return err
		}
		answeredInFlight = answeredInFlight || found
	}
	if inFlight != "" && !answeredInFlight {
		// Its entry is gone (acknowledged): answer the run all the same
		// unless it is terminal.
		e := rdb.Entry{Task: protocol.Task{RequestID: inFlight, TaskID: h[protocol.StatusFieldTaskID]}, OK: true}
		return a.answer(ctx, id, h, kind, inputs[0], group, e, true, r)
	}
	return nil
}

// answerHeldOn is answerHeld for one input stream; it reports whether
// it answered the task in flight.
func (a *answers) answerHeldOn(ctx context.Context, id string, h map[string]string, kind protocol.Kind, input, group string, r retirement, replacing bool) (bool, error) {
	held, err := a.rdb.Held(ctx, input, group, id)
	if err != nil {
		return false, redisError(err, "tasks held by %s", id)
	}
	inFlight := h[protocol.StatusFieldRequestID]
	answeredInFlight := false
	for _, e := range held {
		if !e.OK {
			// Not a task: nothing to answer, but never left pending.
			_ = a.rdb.Ack(ctx, input, group, e.Msg.ID)
			continue
		}
		isInFlight := e.Task.RequestID == inFlight
		answeredInFlight = answeredInFlight || isInFlight
		if replacing && !isInFlight {
			if _, err := a.rdb.Move(ctx, input, input, e.Msg, group); err != nil {
				return false, redisError(err, "put back a task of %s", id)
			}
			continue
		}
		if err := a.answer(ctx, id, h, kind, input, group, e, isInFlight, r); err != nil {
			return false, err
		}
	}
	return answeredInFlight, nil
}

// answerWaiting answers the tasks on a retired long-lived worker's input
// that it never read.
func (a *answers) answerWaiting(ctx context.Context, id string, h map[string]string, input, group string, r retirement) error {
	waiting, err := a.rdb.Waiting(ctx, input, group)
	if err != nil {
		return redisError(err, "tasks waiting for %s", id)
	}
	for _, e := range waiting {
		if !e.OK {
			continue
		}
		if err := a.answer(ctx, id, h, protocol.KindLongLived, input, group, e, false, r); err != nil {
			return err
		}
	}
	return nil
}

// answerGone answers the tasks sent to a retired long-lived worker since
// it was retired (WORKER_GONE) and marks them delivered, so that each is
// answered once; it returns how many it answered. A worker whose status
// hash is gone (its retention ended) has nothing to answer.
func (a *answers) answerGone(ctx context.Context, id string) (int, error) {
	h, err := a.rdb.Status(ctx, id)
	if err != nil || len(h) == 0 {
		return 0, err
	}
	if member, err := a.rdb.IsWorker(ctx, id); err != nil || member {
		return 0, err // back under the same id: its own wrapper reads its input
	}
	_, input, group := inputOf(a.keys, id, protocol.KindLongLived)
	waiting, err := a.rdb.Waiting(ctx, input, group)
	if err != nil || len(waiting) == 0 {
		return 0, err
	}
	r := retirement{reason: protocol.RemovedGone, late: true, code: protocol.CodeWorkerGone,
		msg: "the worker " + id + " was retired before this task was sent: send it to another worker"}
	n := 0
	for _, e := range waiting {
		if e.OK {
			if err := a.answer(ctx, id, h, protocol.KindLongLived, input, group, e, false, r); err != nil {
				return n, err
			}
			n++
		}
	}
	if err := a.rdb.Delivered(ctx, input, group, waiting[len(waiting)-1].Msg.ID); err != nil {
		return n, redisError(err, "input of %s", id)
	}
	return n, nil
}

// answer answers one task of a retired worker: a retryable developer task
// with its entry held goes back to the queue (up to MaxAttempts), any
// other gets a failed Output, unless its run is already terminal.
func (a *answers) answer(ctx context.Context, id string, h map[string]string, kind protocol.Kind, input, group string, e rdb.Entry, inFlight bool, r retirement) error {
	t := e.Task
	code, msg := r.code, r.msg
	if !inFlight && !r.died && !r.late {
		code, msg = protocol.CodeTerminated, fmt.Sprintf("the worker was %s before it ran this task", r.reason)
	}
	attempt, err := a.rdb.LastAttempt(ctx, t.RequestID)
	if err != nil {
		return redisError(err, "attempts of %s", t.RequestID)
	}
	if e.Msg.ID != "" && a.handsOn(kind, t, code, attempt, r) {
		n, err := a.rdb.Requeue(ctx, t.RequestID, input, group, e.Msg)
		if err != nil {
			return redisError(err, "requeue %s", t.RequestID)
		}
		if n > 0 {
			a.log.Info("a dead worker's task put back on its input", "request_id", t.RequestID, "kind", kind, "attempt", attempt+1, "code", code)
		}
		return nil
	}
	o := protocol.Output{RequestID: t.RequestID, TaskID: t.TaskID, ProjectID: t.Project(), WorkerID: id,
		AgentType: protocol.AgentType(h[protocol.StatusFieldAgentType]), Status: protocol.StatusFailed,
		Error: protocol.NewError(code, "%s", msg), Attempt: attempt, Timestamp: a.now()}
	if inFlight {
		o.ProjectID = h[protocol.StatusFieldProjectID]
		if started, err := protocol.ParseTime(h[protocol.StatusFieldTaskStarted]); err == nil && !started.IsZero() {
			o.DurationMS = a.now().Sub(started).Milliseconds()
		}
	}
	if !o.AgentType.Valid() {
		o.AgentType = ""
	}
	out := a.keys.OutputFor(kind, id)
	if inFlight && h[protocol.StatusFieldOutputStream] != "" {
		out = h[protocol.StatusFieldOutputStream]
	}
	if _, err := a.rdb.Answer(ctx, o, out, input, group, e.Msg.ID, a.now()); err != nil {
		return redisError(err, "answer %s", t.RequestID)
	}
	return nil
}
