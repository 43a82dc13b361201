package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// timeline is what the fleet prints, each line stamped with the time since
// the start, and the workers' display names ("w3@host-2"). The run's
// goroutine and the lifecycle follower (events.go) both write to it; mu
// keeps their lines whole and guards names.
type timeline struct {
	out   io.Writer
	start time.Time

	mu    sync.Mutex
	names map[string]string // worker id → "w3@host-2"
}

func newTimeline(out io.Writer, start time.Time) *timeline {
	return &timeline{out: out, start: start, names: map[string]string{}}
}

func (t *timeline) say(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%6.1fs  %s\n", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
}

func (t *timeline) section(title string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "\n== %s\n", title)
}

// printf prints a line of its own, with no time stamp (the verdict).
func (t *timeline) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format, args...)
}

func (t *timeline) name(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n, ok := t.names[id]; ok {
		return n
	}
	return short(id)
}

// nameWorker gives the worker the next display name, on its host, and
// returns it.
func (t *timeline) nameWorker(id, host string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := fmt.Sprintf("w%d@%s", len(t.names)+1, host)
	t.names[id] = n
	return n
}
