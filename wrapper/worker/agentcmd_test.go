package worker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// With DROID_BASE_URL, Droid runs a custom model pointing there: our own
// name for the stub, or AGENT_MODEL (a model that API serves).
func TestDroidCustomModel(t *testing.T) {
	for _, tc := range []struct{ agentModel, wantID string }{
		{"", "agentvisor"},
		{"claude-sonnet-4-5", "claude-sonnet-4-5"},
	} {
		home := t.TempDir()
		// PrepareWorkspace writes every file the agent reads before it
		// starts, the guard hook's settings too (which call the wrapper
		// back at SelfPath).
		c := &Config{WorkerID: "w-custom-" + filepath.Base(home), AgentType: protocol.AgentDroid, AgentBin: "droid", Workspace: filepath.Join(home, "ws"),
			DroidBaseURL: "http://127.0.0.1:9", AgentModel: tc.agentModel, SelfPath: "/usr/local/bin/worker-wrapper"}
		t.Cleanup(func() { os.RemoveAll(filepath.Dir(c.setup().GuardSettingsPath())) })
		if err := c.PrepareWorkspace(home, "sk-test-key"); err != nil {
			t.Fatal(err)
		}
		argv := c.Argv(Invocation{Prompt: "hi"})
		i := slices.Index(argv, "-m")
		if i < 0 || argv[i+1] != "custom:"+tc.wantID {
			t.Errorf("AGENT_MODEL %q: argv %q, want -m custom:%s", tc.agentModel, argv, tc.wantID)
		}
		b, err := os.ReadFile(filepath.Join(home, ".factory", "settings.json"))
		if err != nil || !strings.Contains(string(b), `"model": "`+tc.wantID+`"`) || !strings.Contains(string(b), `"baseUrl": "http://127.0.0.1:9"`) {
			t.Errorf("AGENT_MODEL %q: settings %s (%v)", tc.agentModel, b, err)
		}
	}
}

// AGENT_PERSISTENT takes both agents on a long-lived worker; AGENT_APPROVAL
// is Claude's only (a Droid worker ignores it). A persistent Droid runs in its JSON-RPC mode, its
// session and prompts on stdin.
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
	c := &Config{AgentType: protocol.AgentDroid, AgentBin: "droid", Workspace: "/ws", DroidBaseURL: "http://127.0.0.1:9", SkipPermissions: true}
	argv := c.PersistentArgv(Invocation{Prompt: "hi", ResumeID: "s1"})
	joined := strings.Join(argv, " ")
	if !strings.Contains(joined, "--input-format stream-jsonrpc --output-format stream-jsonrpc") || slices.Contains(argv, "-f") ||
		slices.Contains(argv, "--session-id") || slices.Contains(argv, "hi") || !slices.Contains(argv, "--append-system-prompt") {
		t.Fatalf("persistent droid argv %q", argv)
	}
}
