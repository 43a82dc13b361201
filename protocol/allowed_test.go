package protocol

import "testing"

// allowCase is a table row of what a list of patterns allows and denies.
type allowCase struct {
	name     string
	patterns []string
	allow    []string
	deny     []string
}

// runAllowCases checks each row with allows (Allows, AllowsShell).
func runAllowCases(t *testing.T, tests []allowCase, allows func(AllowedCommands, string) bool) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAllowedCommands(tt.patterns)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.allow {
				if !allows(a, c) {
					t.Errorf("%q denied", c)
				}
			}
			for _, c := range tt.deny {
				if allows(a, c) {
					t.Errorf("%q allowed", c)
				}
			}
		})
	}
}

func TestAllowedCommands(t *testing.T) {
	runAllowCases(t, []allowCase{
		{"empty denies all", nil, nil, []string{"project.get", "worker.progress", "x"}},
		{"exact", []string{"project.get"}, []string{"project.get"}, []string{"project.list", "project", "project.get.x"}},
		{"prefix", []string{"engineering.*"}, []string{"engineering.deploy", "engineering.a.b"}, []string{"engineering", "engineeringx.a", "eng.deploy"}},
		{"star", []string{"*"}, []string{"a", "project.get", "x.y.z"}, []string{"", "A.b", "a..b", "a b"}},
		{"mixed", []string{"project.get", "project.list", "engineering.*"},
			[]string{"project.get", "project.list", "engineering.test"}, []string{"project.delete", "worker.progress"}},
	}, AllowedCommands.Allows)
}

func TestAllowedCommandsMalformed(t *testing.T) {
	for _, p := range []string{"", "eng*", "*.get", "a..b", "a.*.b", "Project.get", "a b", ".a", "a.", "**", "a.**"} {
		if _, err := ParseAllowedCommands([]string{p}); err == nil {
			t.Errorf("pattern %q accepted", p)
		}
	}
}

func TestAllowedCommandsEnv(t *testing.T) {
	tests := []struct {
		name, env string
		allow     string
		wantErr   bool
	}{
		{"json", `["project.get","engineering.*"]`, "engineering.x", false},
		{"commas", "project.get, engineering.*", "engineering.x", false},
		{"empty", "  ", "", false},
		{"bad json", `["project.get"`, "", true},
		{"bad pattern", "project.get,eng*", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAllowedCommandsEnv(tt.env)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.allow != "" && !a.Allows(tt.allow) {
				t.Errorf("%q denied", tt.allow)
			}
			if err == nil && tt.allow == "" && a.Allows("project.get") {
				t.Error("empty list allowed something")
			}
		})
	}
}
