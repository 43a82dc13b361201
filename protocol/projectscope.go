package protocol

// EnvWorkerProject names the project a worker is bound to (set by the
// manager for a worker whose spec binds it, see BoundProject): its Redis
// user reaches that project's keys only, and its wrapper refuses a task
// of any other project.
const EnvWorkerProject = "WORKER_PROJECT_ID"

// BoundProject is the project a worker of spec s serves alone: the
// project_id of a long-lived worker. A developer worker takes tasks of
// any project from the shared queue, and a worker without a project_id
// any project its owner sends, so neither is bound ("").
func (s WorkerSpec) BoundProject() string {
	if s.Kind == KindDeveloper {
		return ""
	}
	return s.ProjectID
}

// CheckID checks an identifier given outside a document (an environment
// variable's value): what a document's id fields accept, the error
// naming field.
func CheckID(field, v string) error { return checkID(field, v, false) }
