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
		c := &Config{AgentType: protocol.AgentDroid, AgentBin: "droid", Workspace: filepath.Join(home, "ws"),
			DroidBaseURL: "http://127.0.0.1:9", AgentModel: tc.agentModel}
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
