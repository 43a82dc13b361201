package worker

import "testing"

func TestParseOOMKills(t *testing.T) {
	tests := []struct {
		in string
		n  int64
		ok bool
	}{
		{"low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n", 2, true},     // cgroup v2 memory.events
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 5\n", 5, true}, // cgroup v1 memory.oom_control
		{"oom_kill_disable 0\nunder_oom 0\n", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		if n, ok := parseOOMKills(tt.in); n != tt.n || ok != tt.ok {
			t.Errorf("parseOOMKills(%q) = %d, %v; want %d, %v", tt.in, n, ok, tt.n, tt.ok)
		}
	}
}
