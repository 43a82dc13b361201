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
	// emit publishes each change of the machine (transitions.go); it is
	// called after the lock is released, in the order of the changes.
	emit func(protocol.WorkerTransition)
	// emitMu keeps the changes' publication in their order.
	emitMu sync.Mutex

	mu       sync.Mutex // guards the fields below
	machine  *protocol.WorkerMachine
	cur      *current // the task in flight; nil when idle
	stopping bool     // shutdown began: no new task starts
	done     int64
}

func newWorkerState(workerID string, now func() time.Time, emit func(protocol.WorkerTransition)) *workerState {
	return &workerState{now: now, emit: emit, machine: protocol.NewWorkerMachine(workerID, now())}
}

// change runs fn on the machine under the lock, then publishes the
// transition it made, if any.
func (s *workerState) change(fn func(m *protocol.WorkerMachine) (protocol.WorkerTransition, bool, error)) error {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	s.mu.Lock()
	tr, changed, err := fn(s.machine)
	s.mu.Unlock()
	if changed && err == nil && s.emit != nil {
		s.emit(tr)
	}
	return err
}

// moved adapts a Transition's result to change's.
func moved(tr protocol.WorkerTransition, err error) (protocol.WorkerTransition, bool, error) {
	return tr, err == nil, err
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
	began := false
	err := s.change(func(m *protocol.WorkerMachine) (protocol.WorkerTransition, bool, error) {
		if s.stopping {
			return protocol.WorkerTransition{}, false, nil
		}
		s.cur, began = cur, true
		return moved(m.Transition(protocol.WorkerBusy, "task "+cur.task.RequestID, s.now()))
	})
	return began, err
}

// end counts the task in flight done and makes the worker idle (a
// stopping worker stays stopping); it returns the count.
func (s *workerState) end(reason string) (int64, error) {
	var done int64
	err := s.change(func(m *protocol.WorkerMachine) (protocol.WorkerTransition, bool, error) {
		s.cur = nil
		s.done++
		done = s.done
		if s.stopping {
			return protocol.WorkerTransition{}, false, nil
		}
		return moved(m.Transition(protocol.WorkerIdle, reason, s.now()))
	})
	return done, err
}

// stop marks the worker stopping; it returns the request in flight.
func (s *workerState) stop() (string, error) {
	reqID := ""
	err := s.change(func(m *protocol.WorkerMachine) (protocol.WorkerTransition, bool, error) {
		s.stopping = true
		if s.cur != nil {
			reqID = s.cur.task.RequestID
		}
		return moved(m.Transition(protocol.WorkerStopping, "shutdown", s.now()))
	})
	return reqID, err
}

func (s *workerState) transition(to protocol.WorkerState, reason string) error {
	return s.change(func(m *protocol.WorkerMachine) (protocol.WorkerTransition, bool, error) {
		return moved(m.Transition(to, reason, s.now()))
	})
}

// beat records a heartbeat written: the first makes the worker healthy.
func (s *workerState) beat() bool {
	changed := false
	_ = s.change(func(m *protocol.WorkerMachine) (protocol.WorkerTransition, bool, error) {
		if m.Health != protocol.HealthUnknown || m.State.Terminal() {
			return protocol.WorkerTransition{}, false, nil
		}
		tr, ok, err := m.SetHealth(protocol.HealthHealthy, "first heartbeat", s.now())
		changed = ok && err == nil
		return tr, ok, err
	})
	return changed
}

// taskEnded records how a task ended (its error code, "" when it did not
// fail; ran: its agent ran) in the worker's health; it reports whether
// the health changed.
func (s *workerState) taskEnded(code protocol.Code, ran bool) bool {
	changed := false
	_ = s.change(func(m *protocol.WorkerMachine) (protocol.WorkerTransition, bool, error) {
		tr, ok := m.TaskEnded(code, ran, s.now())
		changed = ok
		return tr, ok, nil
	})
	return changed
}

// healthCheckDue reports whether a degraded worker's cool-down passed.
func (s *workerState) healthCheckDue(cooldown time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.machine.HealthCheckDue(cooldown, s.now())
}

// healthCheckPassed makes a degraded worker healthy again.
func (s *workerState) healthCheckPassed(check string) bool {
	changed := false
	_ = s.change(func(m *protocol.WorkerMachine) (protocol.WorkerTransition, bool, error) {
		tr, ok := m.HealthCheckPassed(check, s.now())
		changed = ok
		return tr, ok, nil
	})
	return changed
}

// snapshot is the state as one reading.
type snapshot struct {
	state    protocol.WorkerState
	health   protocol.Health
	since    time.Time // when the state (or health) began
	stopping bool
	cur      *current
	done     int64
}

func (s *workerState) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return snapshot{state: s.machine.State, health: s.machine.Health, since: s.machine.Entered, stopping: s.stopping, cur: s.cur, done: s.done}
}
