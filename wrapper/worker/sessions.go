package worker

import (
	"context"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// SessionPlan is how a task's agent session was chosen.
type SessionPlan struct {
	ResumeID string // the session to continue; "" for a new one
	Extra    string // appended to the system prompt (the project's context)
	Decision protocol.SessionDecision
}

// SessionPolicy chooses the agent session of each task and learns from
// each run. It is the seam for the project-session policy.
type SessionPolicy interface {
	// Decide chooses the session of a task before its agent starts.
	Decide(ctx context.Context, task protocol.Task) SessionPlan
	// Complete sees the outcome of the run. It may run the task again,
	// through rerun, in a new session (a resume that failed), and returns
	// the outcome and plan that stand.
	Complete(ctx context.Context, task protocol.Task, plan SessionPlan, o agent.Outcome,
		rerun func(Invocation) agent.Outcome) (agent.Outcome, SessionPlan)
}

// NewSessions runs every task in a new session.
type NewSessions struct{}

var _ SessionPolicy = NewSessions{}

// Decide implements SessionPolicy.
func (NewSessions) Decide(_ context.Context, task protocol.Task) SessionPlan {
	reason := protocol.SessionReasonNoSession
	if task.ForceNewSession {
		reason = protocol.SessionReasonForced
	}
	return SessionPlan{Decision: protocol.SessionDecision{Action: protocol.SessionNew, Reason: reason}}
}

// Complete implements SessionPolicy.
func (NewSessions) Complete(_ context.Context, _ protocol.Task, plan SessionPlan, o agent.Outcome,
	_ func(Invocation) agent.Outcome) (agent.Outcome, SessionPlan) {
	return o, plan
}
