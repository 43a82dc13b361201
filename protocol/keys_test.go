package protocol

import "testing"

func TestKeyNames(t *testing.T) {
	k := Keys{}
	tests := []struct {
		name, got, want string
	}{
		{"commands", k.Commands(), "worker:commands"},
		{"lifecycle", k.Lifecycle(), "worker:lifecycle"},
		{"control", k.Control(), "worker:control"},
		{"status", k.Status("w1"), "worker:status:w1"},
		{"heartbeat", k.Heartbeat("w1"), "worker:heartbeat:w1"},
		{"input", k.Input("w1"), "worker:w1:input"},
		{"output", k.Output("w1"), "worker:w1:output"},
		{"developer input", k.DeveloperInput(), "worker:developer:input"},
		{"developer output", k.DeveloperOutput(), "worker:developer:output"},
		{"input for long-lived", k.InputFor(KindLongLived, "w1"), "worker:w1:input"},
		{"input for developer", k.InputFor(KindDeveloper, "w1"), "worker:developer:input"},
		{"output for long-lived", k.OutputFor(KindLongLived, "w1"), "worker:w1:output"},
		{"output for developer", k.OutputFor(KindDeveloper, "w1"), "worker:developer:output"},
		{"run", k.Run("r1"), "worker:run:r1"},
		{"workers", k.Workers(), "worker:workers"},
		{"session", k.Session(AgentClaude, "p1"), "worker:session:claude:p1"},
		{"project context", k.ProjectContext("p1"), "worker:project:p1:context"},
		{"usage project", k.UsageProject("p1"), "worker:usage:project:p1"},
		{"usage session", k.UsageSession("s1"), "worker:usage:session:s1"},
		{"usage worker", k.UsageWorker("w1"), "worker:usage:worker:w1"},
		{"replies", k.Replies("bot"), "worker:replies:bot"},
		{"managers", k.Managers(), "worker:managers"},
		{"manager state", k.ManagerState("m1"), "worker:manager:m1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestKeyPrefix(t *testing.T) {
	k, err := NewKeys("staging:wk")
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Status("w1"); got != "staging:wk:status:w1" {
		t.Errorf("Status = %q", got)
	}
	if got := k.DeveloperInput(); got != "staging:wk:developer:input" {
		t.Errorf("DeveloperInput = %q", got)
	}
	if k, _ := NewKeys(""); k.Commands() != "worker:commands" {
		t.Errorf("empty prefix does not default: %q", k.Commands())
	}
	for _, bad := range []string{"a b", ":x", "x:", "a{b}", "tab\t"} {
		if _, err := NewKeys(bad); err == nil {
			t.Errorf("NewKeys(%q) accepted a bad prefix", bad)
		}
	}
}
