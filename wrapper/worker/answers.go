package worker

import (
	"context"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// A task may answer a run (`answers`, a blocked task's question): it
// continues that run's session in that run's project, whatever the session
// policy would choose, and its output names the run it answers.

// answeredRun looks up the run task answers. It returns the task with the
// run's project (a task that names none takes it), and an error output's
// code when the task cannot answer it: NOT_FOUND when the run is unknown,
// expired or not finished, or has no session; INVALID_TASK when the task
// names another project.
func (ts *tasks) answeredRun(task protocol.Task) (protocol.Task, rdb.AnsweredRun, *protocol.Error) {
	a, err := store(ts.pub, "read answered run "+task.Answers, func(c context.Context) (rdb.AnsweredRun, error) {
		return ts.rdb.Answered(c, task.Answers)
	})
	switch {
	case err != nil:
		return task, a, protocol.NewError(protocol.CodeInternalError, "redis refused to read the answered run: %v", err)
	case !a.Found:
		return task, a, protocol.NewError(protocol.CodeNotFound, "the run %s this task answers is unknown or expired", task.Answers)
	case !a.Terminal:
		return task, a, protocol.NewError(protocol.CodeNotFound, "the run %s this task answers has not finished", task.Answers)
	case a.SessionID == "":
		return task, a, protocol.NewError(protocol.CodeNotFound, "the run %s this task answers has no agent session", task.Answers)
	case task.ProjectID != "" && task.Project() != a.ProjectID:
		return task, a, protocol.NewError(protocol.CodeInvalidTask, "the task is for project %s but answers a run of project %s", task.Project(), a.ProjectID)
	}
	task.ProjectID = a.ProjectID
	return task, a, nil
}

// answerPlan makes plan continue the answered run's session.
func answerPlan(plan SessionPlan, a rdb.AnsweredRun) SessionPlan {
	plan.ResumeID, plan.Context = a.SessionID, ""
	plan.Decision = protocol.SessionDecision{Action: protocol.SessionResume, Reason: protocol.SessionReasonAnswers, PreviousSessionID: a.SessionID}
	return plan
}
