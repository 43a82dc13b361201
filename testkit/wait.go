package testkit

import (
	"testing"
	"time"
)

// Eventually polls f until it holds, and fails the test, naming what it
// waited for, when timeout passes first.
func Eventually(t testing.TB, what string, timeout time.Duration, f func() bool) {
	t.Helper()
	if !Poll(timeout, 25*time.Millisecond, f) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Poll calls f every interval until it holds, and reports whether it did
// before bound passed. f is called at least once, and once more after the
// bound when the last call came before it.
func Poll(bound, interval time.Duration, f func() bool) bool {
	deadline := time.Now().Add(bound)
	for {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}
