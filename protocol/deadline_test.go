package protocol

import (
	"bytes"
	"testing"
	"time"
)

// A command's deadline crosses the wire and decides whether a manager
// may still carry it out: at the deadline it may not.
func TestCommandDeadline(t *testing.T) {
	at := time.Date(2026, 11, 21, 9, 28, 0, 0, time.UTC)
	doc, err := Command{ID: "c1", Action: ActionList, Deadline: at}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := DecodeCommand(doc)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cmd  Command
		now  time.Time
		want bool
	}{
		{"before the deadline", cmd, at.Add(-time.Millisecond), false},
		{"at the deadline", cmd, at, true},
		{"after the deadline", cmd, at.Add(time.Second), true},
		{"no deadline", Command{ID: "c2", Action: ActionList}, at.Add(1000 * time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cmd.Expired(tt.now); got != tt.want {
				t.Errorf("Expired(%v) = %v, want %v (deadline %v)", tt.now, got, tt.want, tt.cmd.Deadline)
			}
		})
	}
	if noDeadline, _ := (Command{ID: "c3", Action: ActionList}).Encode(); bytes.Contains(noDeadline, []byte("deadline")) {
		t.Errorf("a command without a deadline encodes one: %s", noDeadline)
	}
}
