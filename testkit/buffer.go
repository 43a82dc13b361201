package testkit

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a process's or a goroutine's writes
// may fill while the test reads it (a log under test).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
