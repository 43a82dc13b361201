package logsink

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// A log nobody reads (a pipe whose buffer is full, as a container's
// stderr while the engine is away) never blocks a writer: lines beyond
// the queue are dropped, and once the log is read again every queued
// line comes out in order, then a line that says how many were dropped.
func TestAStalledLogNeverBlocksAWriter(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := New(w, 100)
	const n = 5000 // 1 MB: far more than the pipe and the queue hold
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := 0; i < n; i++ {
			fmt.Fprintf(s, `{"msg":"line %d","pad":%q}`+"\n", i, strings.Repeat("x", 180))
		}
	}()
	select {
	case <-wrote:
	case <-time.After(30 * time.Second):
		t.Fatal("a write blocked on a log nobody reads")
	}
	if s.Dropped() == 0 {
		t.Fatal("nothing dropped: the pipe was read after all?")
	}
	// The reader comes back: the queue drains, and a line written then
	// comes out after the drop notice.
	lines := make(chan string, n+10)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(s.lines) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(s, `{"msg":"after"}`+"\n")
	s.Close(10 * time.Second)
	w.Close()
	last, kept, dropped, after := -1, 0, int64(0), false
	for text := range lines {
		var line struct {
			Msg     string
			Dropped int64
		}
		if err := json.Unmarshal([]byte(text), &line); err != nil {
			t.Fatalf("a line that is not JSON: %q", text)
		}
		var i int
		switch {
		case line.Dropped > 0:
			dropped += line.Dropped
		case line.Msg == "after":
			after = true
		case func() bool { _, err := fmt.Sscanf(line.Msg, "line %d", &i); return err == nil }():
			if i <= last {
				t.Fatalf("line %d after line %d", i, last)
			}
			last = i
			kept++
		}
	}
	if !after {
		t.Error("the line written once the log was read again is missing")
	}
	if int64(kept)+dropped != n {
		t.Errorf("%d lines kept, %d said dropped: want %d in all", kept, dropped, n)
	}
}

// Close writes out what is queued.
func TestCloseWritesTheQueuedLines(t *testing.T) {
	var b strings.Builder
	s := New(&b, 0)
	for i := 0; i < 50; i++ {
		fmt.Fprintf(s, "line %d\n", i)
	}
	if !s.Close(5 * time.Second) {
		t.Fatal("queued lines not written within 5 s")
	}
	if got := strings.Count(b.String(), "\n"); got != 50 {
		t.Fatalf("%d lines written, want 50", got)
	}
	fmt.Fprintf(s, "after the close\n") // dropped, not a panic
}
