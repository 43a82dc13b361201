package worker

import (
	"math"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// output builds the Output event of a task.
func (w *Worker) output(task protocol.Task, oc agent.Outcome, v agent.Verdict, plan SessionPlan, attempt int) protocol.Output {
	o := protocol.Output{
		RequestID: task.RequestID, TaskID: task.TaskID, ProjectID: task.Project(), WorkerID: w.cfg.WorkerID,
		AgentType: w.cfg.AgentType, Status: v.Status, Response: w.redact.Redact(v.Response), Result: w.redact.RedactJSON(v.Result),
		Question: w.redact.Redact(v.Question), DurationMS: oc.Duration.Milliseconds(), Metadata: w.redact.RedactMap(task.Metadata), Timestamp: w.now(),
		Attempt: attempt,
	}
	if d := plan.Decision; d.Action != "" {
		if d.ResumeError != nil {
			e := *d.ResumeError
			e.Message = w.redact.Redact(e.Message)
			d.ResumeError = &e
		}
		o.Session = &d
	}
	if v.Error != nil {
		e := *v.Error
		e.Message = w.redact.Redact(e.Message)
		o.Error = &e
	}
	o.Usage, o.CostUSD = taskUsage(oc)
	if r := oc.Result; r != nil {
		o.SessionID = r.SessionID
		// The context is what the LAST API call used; the result's usage
		// sums every call of the run. Droid and Codex report no per-call
		// usage: the proxy's last metered call stands for it
		// (spending.withEstimate), else the sum is an upper bound.
		o.ContextTokens = r.Usage.Context()
	}
	if oc.LastTurn != nil {
		o.ContextTokens = oc.LastTurn.Usage.Context()
	}
	if o.SessionID == "" && oc.Init != nil {
		o.SessionID = oc.Init.SessionID
	}
	return o
}

// taskUsage is what a task used, as its output reports it and the usage
// counters count it: the result's figures; when the agent gave no result
// (it timed out, crashed or was stopped), the sum of the API calls it
// reported, at no known cost.
func taskUsage(oc agent.Outcome) (protocol.Usage, float64) {
	if oc.Result == nil {
		return oc.TurnsUsage(), 0
	}
	cost := oc.Result.CostUSD
	if cost < 0 || math.IsNaN(cost) || math.IsInf(cost, 0) {
		cost = 0
	}
	return oc.Result.Usage, cost
}

func errCode(e *protocol.Error) string {
	if e == nil {
		return ""
	}
	return string(e.Code)
}

// unrunOutput is the failed output of a task whose agent never ran.
func (w *Worker) unrunOutput(task protocol.Task, e *protocol.Error) protocol.Output {
	return protocol.Output{RequestID: task.RequestID, TaskID: task.TaskID, ProjectID: task.ProjectID, WorkerID: w.cfg.WorkerID,
		AgentType: w.cfg.AgentType, Status: protocol.StatusFailed, Error: e, Metadata: w.redact.RedactMap(task.Metadata), Timestamp: w.now()}
}

// reject answers a task entry that could not be decoded: a failed output
// with INVALID_TASK under the request id invalid-<entry id>, and the entry
// is acknowledged. A document that failed validation proves no request id:
// the one it claims is only echoed in the message, so that it can neither
// publish nor suppress the output of the run that really has that id
// (which may be running on another worker).
func (w *Worker) reject(src taskSource, data []byte, cause error) {
	reqID := "invalid-" + src.entryID
	msg := w.redact.Redact(cause.Error())
	if claimed := gjson.GetBytes(data, "request_id").String(); claimed != "" {
		msg += "; the entry's request_id was " + cutUTF8(w.redact.Redact(claimed), 256)
	}
	task := protocol.Task{RequestID: reqID}
	o := w.unrunOutput(task, protocol.NewError(protocol.CodeInvalidTask, "%s", msg))
	log := w.log.With("request_id", reqID)
	log.Warn("invalid task", "entry", src.entryID, "err", msg)
	now := w.now()
	run := protocol.NewRun(reqID, o.TaskID, w.cfg.WorkerID, "", now)
	_ = run.Fail(protocol.CodeInvalidTask, msg, now)
	w.pub.storeOutput(log, src, o, run.Hash(), nil)
	w.pub.lifecycle(protocol.EventTaskFailed, reqID, o.TaskID, map[string]any{"code": protocol.CodeInvalidTask})
	w.requestPause(reqID, o.TaskID, "stop_output:"+string(o.Status))
}
