package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

func TestPermissionArgs(t *testing.T) {
	tests := []struct {
		name      string
		agent     protocol.AgentType
		patterns  []string
		skip      bool
		want      []string
		wantGuard bool
	}{
		{"claude deny all", protocol.AgentClaude, nil, true,
			[]string{"--permission-mode", "dontAsk", "--allowedTools=Edit,Write,NotebookEdit,Bash(worker-wrapper progress:*)"}, false},
		{"claude list", protocol.AgentClaude, []string{"engineering.*", "project.get"}, true,
			[]string{"--permission-mode", "dontAsk", "--allowedTools=Edit,Write,NotebookEdit,Bash(worker-wrapper progress:*),Bash(project get:*),Bash(engineering:*)"}, false},
		{"claude star", protocol.AgentClaude, []string{"*"}, true, []string{"--dangerously-skip-permissions"}, false},
		{"claude star, no skip", protocol.AgentClaude, []string{"*"}, false,
			[]string{"--permission-mode", "dontAsk", "--allowedTools=Edit,Write,NotebookEdit,Bash"}, false},
		{"droid list", protocol.AgentDroid, []string{"git.push"}, true, []string{"--skip-permissions-unsafe", "--settings"}, true},
		{"droid star", protocol.AgentDroid, []string{"*"}, true, []string{"--skip-permissions-unsafe"}, false},
		{"droid star, no skip", protocol.AgentDroid, []string{"*"}, false, []string{"--auto", "high"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Setup{WorkerID: "w-perm-" + strings.ReplaceAll(tt.name, " ", "-"), SkipPermissions: tt.skip, SelfPath: "/usr/local/bin/worker-wrapper"}
			s.Allowed, _ = protocol.ParseAllowedCommands(tt.patterns)
			var got []string
			if tt.agent == protocol.AgentDroid {
				got = Droid{s}.permissionArgs()
			} else {
				got = Claude{s}.permissionArgs()
			}
			if tt.wantGuard {
				if len(got) != 3 || got[2] != s.GuardSettingsPath() {
					t.Fatalf("args %q", got)
				}
				got = got[:2]
				if err := (Droid{s}).writeGuard(); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(s.GuardSettingsPath())
				if err != nil || !strings.Contains(string(b), `"command": "'/usr/local/bin/worker-wrapper' guard"`) || !strings.Contains(string(b), `"matcher": "Execute"`) {
					t.Errorf("guard settings %s (%v)", b, err)
				}
				os.RemoveAll(filepath.Dir(s.GuardSettingsPath()))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("args %q, want %q", got, tt.want)
			}
		})
	}
}

// A progress call that goes wrong (no step, a percentage that is not a
// number, one out of range) is refused, and the consumer sees each as a
// warning of the task; a good one still counts.
