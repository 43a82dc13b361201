package worker

import "github.com/agentvisor/agentvisor/protocol"

// inProject binds task to the worker's project (WORKER_PROJECT_ID): a
// bound worker's Redis user reaches that project's keys only, so a task of
// another project is refused INVALID_TASK before any of them is touched,
// and a task that names no project runs in the worker's. An unbound worker
// takes every task as it is.
func (ts *tasks) inProject(task protocol.Task) (protocol.Task, *protocol.Error) {
	if ts.project == "" {
		return task, nil
	}
	if task.ProjectID == "" {
		task.ProjectID = ts.project
		return task, nil
	}
	if task.ProjectID != ts.project {
		return task, protocol.NewError(protocol.CodeInvalidTask, "the task is for project %s but this worker serves project %s only", task.ProjectID, ts.project)
	}
	return task, nil
}
