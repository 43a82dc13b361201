package worker

import (
	"math"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// outputs builds the Output documents of this worker's tasks: every text
// in them redacted, the worker's ids and the time filled in.
type outputs struct {
	workerID  string
	agentType protocol.AgentType
	redact    *Redactor
	now       func() time.Time
}

// output builds the Output event of a task.
func (w outputs) output(task protocol.Task, oc agent.Outcome, v agent.Verdict, plan SessionPlan, attempt int) protocol.Output {
	o := protocol.Output{
		RequestID: task.RequestID, TaskID: task.TaskID, ProjectID: task.Project(), WorkerID: w.workerID,
		AgentType: w.agentType, Status: v.Status, Response: w.redact.Redact(v.Response), Result: w.redact.RedactJSON(v.Result),
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
func (w outputs) unrun(task protocol.Task, e *protocol.Error) protocol.Output {
	return protocol.Output{RequestID: task.RequestID, TaskID: task.TaskID, ProjectID: task.ProjectID, WorkerID: w.workerID,
		AgentType: w.agentType, Status: protocol.StatusFailed, Error: e, Metadata: w.redact.RedactMap(task.Metadata), Timestamp: w.now()}
}

// cancelled makes o the output of a cancelled task: status cancelled
// with CANCELLED, whatever the agent said after the interrupt.
func (w outputs) cancelled(o protocol.Output, reason string, ran bool) protocol.Output {
	msg := "cancelled before it ran"
	if ran {
		msg = "cancelled while running"
	}
	if reason != "" {
		msg += ": " + w.redact.Redact(reason)
	}
	o.Status, o.Result, o.Question = protocol.StatusCancelled, nil, ""
	o.Error = protocol.NewError(protocol.CodeCancelled, "%s", msg)
	return o
}
