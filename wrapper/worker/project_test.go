package worker

import (
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// A worker bound to a project runs that project's tasks (a task naming
// none among them) and refuses another's INVALID_TASK before any of its
// keys is touched; an unbound worker takes every project's.
func TestTasksOfABoundWorkerStayInItsProject(t *testing.T) {
	tests := []struct {
		name, bound, task, want string
		refused                 bool
	}{
		{name: "its project", bound: "pa", task: "pa", want: "pa"},
		{name: "no project named", bound: "pa", task: "", want: "pa"},
		{name: "another project", bound: "pa", task: "pb", refused: true},
		{name: "unbound, any project", bound: "", task: "pb", want: "pb"},
		{name: "unbound, none named", bound: "", task: "", want: protocol.DefaultProject},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := &tasks{tasksParams: tasksParams{project: tt.bound}}
			got, err := ts.inProject(protocol.Task{RequestID: "r", ProjectID: tt.task, Prompt: "p"})
			if tt.refused {
				if err == nil || err.Code != protocol.CodeInvalidTask {
					t.Fatalf("got %+v, want INVALID_TASK", err)
				}
				return
			}
			if err != nil || got.Project() != tt.want {
				t.Fatalf("got project %q (%v), want %q", got.Project(), err, tt.want)
			}
		})
	}
}
