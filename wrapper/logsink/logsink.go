// Package logsink is the wrapper's log output: lines go to the
// container's stderr through a bounded queue, and writing one never
// blocks.
//
// The engine reads a container's stderr through a pipe. While the engine
// is away (a restart under --live-restore, a hung daemon) nobody reads
// it: the pipe's buffer (64 KiB on Linux) fills, and a plain write blocks
// the goroutine that logs and, through the log handler's lock, every
// goroutine that logs after it. A worker whose heartbeat or task loop
// waits on a log line stops beating and is judged dead, although its
// container runs. Here a full queue drops lines instead and counts them;
// the first line written after a drop says how many were lost.
package logsink

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLines is the queue's capacity in lines: about 1 MiB of the
// wrapper's log lines, minutes of a busy worker's log.
const DefaultLines = 4096

// Sink queues lines for out. Its zero value is not usable: see New.
type Sink struct {
	out     io.Writer
	lines   chan []byte
	dropped atomic.Int64
	closed  atomic.Bool
	done    chan struct{}
	mu      sync.Mutex // Write against Close
}

// New starts a sink that writes to out, queueing at most lines lines
// (DefaultLines when lines <= 0).
func New(out io.Writer, lines int) *Sink {
	if lines <= 0 {
		lines = DefaultLines
	}
	s := &Sink{out: out, lines: make(chan []byte, lines), done: make(chan struct{})}
	go s.run()
	return s
}

// Write queues a copy of p (a log handler writes one line per call) and
// returns at once: len(p), nil even when the line is dropped, so that no
// caller fails or retries for the log's sake.
func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		s.dropped.Add(1)
		return len(p), nil
	}
	select {
	case s.lines <- append([]byte(nil), p...):
	default:
		s.dropped.Add(1)
	}
	return len(p), nil
}

// Dropped returns how many lines were dropped so far.
func (s *Sink) Dropped() int64 { return s.dropped.Load() }

func (s *Sink) run() {
	defer close(s.done)
	reported := int64(0)
	for line := range s.lines {
		if d := s.dropped.Load(); d > reported {
			// In the handler's own JSON form, so that a reader of the
			// log parses it as any other line.
			fmt.Fprintf(s.out, `{"time":%q,"level":"WARN","msg":"log lines dropped: nobody read the log (the container engine away?)","dropped":%d}`+"\n",
				time.Now().Format(time.RFC3339Nano), d-reported)
			reported = d
		}
		_, _ = s.out.Write(line)
	}
}

// Close stops taking lines and waits at most timeout for the queued ones
// to be written (the wrapper's last lines as it exits); it reports
// whether they all were.
func (s *Sink) Close(timeout time.Duration) bool {
	s.mu.Lock()
	if !s.closed.Swap(true) {
		close(s.lines)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
		return true
	case <-time.After(timeout):
		return false
	}
}
