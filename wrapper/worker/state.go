package worker

import (
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// workerState is the worker's state machine, the task in flight and the
// count of tasks done, under a lock of their own: the task loop changes
// them, the heartbeat, the progress endpoint, the input's follower and
// the model API proxy's hooks read them.
type workerState struct {
	now func() time.Time

	mu       sync.Mutex // guards the fields below
	machine  *protocol.WorkerMachine
	cur      *current // the task in flight; nil when idle
	stopping bool     // shutdown began: no new task starts
	done     int64
}

func newWorkerState(workerID string, now func() time.Time) *workerState {
	return &workerState{now: now, machine: protocol.NewWorkerMachine(workerID, now())}
}

// current is the task in flight, nil when idle.
func (s *workerState) current() *current {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// currentOf is the task in flight when it is the run of requestID.
func (s *workerState) currentOf(requestID string) *current {
	if cur := s.current(); cur != nil && cur.task.RequestID == requestID {
		return cur
	}
	return nil
}

// owner is the task in flight when token is its progress token.
func (s *workerState) owner(token string) (cur *current, own bool) {
	cur = s.current()
	return cur, cur != nil && tokenEqual(token, cur.progressToken())
}

// begin makes cur the task in flight and the worker busy, unless shutdown
// began (then it returns false).
func (s *workerState) begin(cur *current) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false, nil
	}
	s.cur = cur
	_, err := s.machine.Transition(protocol.WorkerBusy, "task "+cur.task.RequestID, s.now())
	return true, err
}

// end counts the task in flight done and makes the worker idle (a
// stopping worker stays stopping); it returns the count.
func (s *workerState) end(reason string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = nil
	s.done++
	var err error
	if !s.stopping {
		_, err = s.machine.Transition(protocol.WorkerIdle, reason, s.now())
	}
	return s.done, err
}

// stop marks the worker stopping; it returns the request in flight.
func (s *workerState) stop() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	_, err := s.machine.Transition(protocol.WorkerStopping, "shutdown", s.now())
	if s.cur != nil {
		return s.cur.task.RequestID, err
	}
	return "", err
}

func (s *workerState) transition(to protocol.WorkerState, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.machine.Transition(to, reason, s.now())
	return err
}

// snapshot is the state as one reading.
type snapshot struct {
	state    protocol.WorkerState
	stopping bool
	cur      *current
	done     int64
}

func (s *workerState) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return snapshot{state: s.machine.State, stopping: s.stopping, cur: s.cur, done: s.done}
}
