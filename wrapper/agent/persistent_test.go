package agent

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process that does not read its stdin fills the pipe: writing a large
// message then blocks, and the task's timeout and cancellation must still
// end the Send (and the process).
func TestPersistentSendBoundsTheWrite(t *testing.T) {
	big := ClaudeUserMessage(strings.Repeat("x", 1<<20)) // far more than a pipe holds
	tests := []struct {
		name      string
		timeout   time.Duration
		cancel    time.Duration // cancel the context after this long; 0: never
		timedOut  bool
		cancelled bool
	}{
		{name: "timeout", timeout: 300 * time.Millisecond, timedOut: true},
		{name: "terminate", cancel: 300 * time.Millisecond, cancelled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := StartPersistent(fakeSpec(false, "fake:sleep-60000"))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel > 0 {
				time.AfterFunc(tt.cancel, cancel)
			}
			done := make(chan Outcome, 1)
			start := time.Now()
			go func() { done <- p.Send(ctx, big, tt.timeout, nil) }()
			select {
			case o := <-done:
				if o.TimedOut != tt.timedOut || o.Cancelled != tt.cancelled {
					t.Fatalf("timed out %v, cancelled %v; want %v, %v", o.TimedOut, o.Cancelled, tt.timedOut, tt.cancelled)
				}
				if p.Alive() {
					t.Error("the process still serves after its send was cut short")
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Send still blocked in its write after %v", time.Since(start))
			}
		})
	}
}

// A process that printed its lines and exited before the message was
// written (its stdin gone: the write fails) still has them in its
// output: the outcome records them, its result with them, and the
// process is no longer Alive.
func TestPersistentSendToAnExitedProcessKeepsWhatItPrinted(t *testing.T) {
	p, err := StartPersistent(fakeSpec(false, "exits at once, reading nothing"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(p.Pid(), 0) == nil { // gone once its starter reaped it
		if time.Now().After(deadline) {
			t.Fatal("the fake agent did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	o := p.Send(context.Background(), ClaudeUserMessage("hello"), 5*time.Second, nil)
	if o.Init == nil || o.Result == nil || o.Result.IsError {
		t.Fatalf("the outcome lost what the process printed: init %v, result %+v, exit %v", o.Init != nil, o.Result, o.Exit)
	}
	if p.Alive() {
		t.Error("an exited process is taken as alive")
	}
}
