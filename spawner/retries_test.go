package spawner

import (
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// Which dead worker's task goes back on the input rather than being
// answered.
func TestHandsOn(t *testing.T) {
	s := &Spawner{cfg: Config{Retry: protocol.RetryPolicy{Attempts: 3, BackoffMS: []int{10}}}}
	asked := protocol.Task{RequestID: "r", Prompt: "p", Retry: &protocol.RetryPolicy{}}
	asks5 := protocol.Task{RequestID: "r", Prompt: "p", Retry: &protocol.RetryPolicy{Attempts: 5}}
	plain := protocol.Task{RequestID: "r", Prompt: "p"}
	died := retirement{died: true, replacing: true}
	for _, c := range []struct {
		name    string
		kind    protocol.Kind
		task    protocol.Task
		code    protocol.Code
		attempt int
		r       retirement
		want    bool
	}{
		{"long-lived, asked, replacement coming", protocol.KindLongLived, asked, protocol.CodeAgentCrashed, 1, died, true},
		{"long-lived, asked, operator's attempts spent", protocol.KindLongLived, asked, protocol.CodeAgentCrashed, 3, died, false},
		{"long-lived, its own attempts left", protocol.KindLongLived, asks5, protocol.CodeOOMKilled, 4, died, true},
		{"long-lived, did not ask", protocol.KindLongLived, plain, protocol.CodeAgentCrashed, 1, died, false},
		{"long-lived, no replacement", protocol.KindLongLived, asked, protocol.CodeAgentCrashed, 1, retirement{died: true}, false},
		{"long-lived, not retryable", protocol.KindLongLived, asked, protocol.CodeWorkerGone, 1, died, false},
		{"developer, did not ask", protocol.KindDeveloper, plain, protocol.CodeKilled, 2, retirement{}, true},
		{"developer, did not ask, third attempt", protocol.KindDeveloper, plain, protocol.CodeKilled, 3, retirement{}, false},
		{"developer, asked for more", protocol.KindDeveloper, asks5, protocol.CodeKilled, 4, retirement{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := s.handsOn(c.kind, c.task, c.code, c.attempt, c.r); got != c.want {
				t.Errorf("handsOn = %v, want %v", got, c.want)
			}
		})
	}
}
