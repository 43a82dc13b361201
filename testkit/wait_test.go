package testkit

import (
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if !Poll(time.Second, time.Millisecond, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Poll gave up or called f %d times, want 3", n)
	}
	t0 := time.Now()
	if Poll(50*time.Millisecond, 10*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	if took := time.Since(t0); took < 50*time.Millisecond || took > time.Second {
		t.Fatalf("Poll gave up after %v, want just after 50 ms", took)
	}
}
