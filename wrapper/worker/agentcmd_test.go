package worker

import (
	"strings"
	"testing"
)

// AGENT_PERSISTENT takes both agents on a long-lived worker; AGENT_APPROVAL
// is Claude's only (a Droid worker ignores it). The command lines of a
// persistent process are the adapters' (package agent).
func TestPersistentConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string // the variable the error names; "" for none
	}{
		{"claude", map[string]string{"AGENT_TYPE": "claude", "AGENT_PERSISTENT": "true"}, ""},
		{"droid", map[string]string{"AGENT_TYPE": "droid", "AGENT_PERSISTENT": "true", "AGENT_PREWARM": "true"}, ""},
		{"developer worker", map[string]string{"AGENT_TYPE": "droid", "AGENT_PERSISTENT": "true", "WORKER_KIND": "developer"}, "AGENT_PERSISTENT"},
		{"on a pty", map[string]string{"AGENT_TYPE": "claude", "AGENT_PERSISTENT": "true", "AGENT_PTY": "true"}, "AGENT_PERSISTENT"},
		{"droid approval, ignored", map[string]string{"AGENT_TYPE": "droid", "AGENT_APPROVAL": "true"}, ""},
		{"claude approval", map[string]string{"AGENT_TYPE": "claude", "AGENT_PERSISTENT": "true", "AGENT_APPROVAL": "true"}, ""},
		{"claude approval, per task", map[string]string{"AGENT_TYPE": "claude", "AGENT_APPROVAL": "true"}, "AGENT_APPROVAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"WORKER_ID": "w1", "REDIS_URL": "redis://127.0.0.1:6379/0"}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := FromEnv(mapEnv(env))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
			}
		})
	}
}
