package protocol

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrInvalidTransition is wrapped by every refused state transition.
var ErrInvalidTransition = errors.New("protocol: invalid state transition")

// TransitionError says which transition was refused.
type TransitionError struct {
	Machine  string // "run" or "worker"
	From, To string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("protocol: %s: transition %s -> %s is not allowed", e.Machine, e.From, e.To)
}

func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// RunState is the state of one run (one task).
type RunState string

const (
	RunRequested RunState = "requested" // the wrapper read the task
	RunQueued    RunState = "queued"    // accepted, waiting for the agent
	RunRunning   RunState = "running"   // the agent runs
	RunCompleted RunState = "completed" // terminal: the task ended complete or blocked
	RunFailed    RunState = "failed"    // terminal: the task failed
)

// RunStates lists every run state in lifecycle order.
var RunStates = []RunState{RunRequested, RunQueued, RunRunning, RunCompleted, RunFailed}

// RunTransitions is the table of allowed run transitions; every other one
// is refused. running -> running is a step update. A run may fail from any
// state that is not terminal; it never goes back, and terminal states
// never change.
var RunTransitions = map[RunState][]RunState{
	RunRequested: {RunQueued, RunFailed},
	RunQueued:    {RunRunning, RunFailed},
	RunRunning:   {RunRunning, RunCompleted, RunFailed},
	RunCompleted: {},
	RunFailed:    {},
}

// Terminal reports whether s never changes again.
func (s RunState) Terminal() bool { return s == RunCompleted || s == RunFailed }

// Valid reports whether s is a known run state.
func (s RunState) Valid() bool { _, ok := RunTransitions[s]; return ok }

// CheckRunTransition returns nil when from -> to is allowed, and a
// *TransitionError otherwise.
func CheckRunTransition(from, to RunState) error {
	if slices.Contains(RunTransitions[from], to) {
		return nil
	}
	return &TransitionError{Machine: "run", From: string(from), To: string(to)}
}

// Run is the status of one run, as stored in the run hash. It has three
// writers: the sender makes it requested (client.Tasks), the wrapper
// moves it through every later state with Transition and Step, and the
// spawner, for a task whose worker died, fails it or counts its hand-over
// to the next incarnation (its attempts).
type Run struct {
	RequestID      string
	TaskID         string
	WorkerID       string
	ProjectID      string
	AgentSlug      string // the agent that runs it: the worker's agent type
	Trigger        string // what started it (the task's trigger)
	State          RunState
	CurrentStep    string
	StepsTotal     int // 0 when unknown
	StepsCompleted int
	Error          string // "CODE: message" when failed
	CreatedAt      time.Time
	StartedAt      time.Time // entered running
	FinishedAt     time.Time // entered a terminal state
	UpdatedAt      time.Time
}

// NewRun returns a run in state requested.
func NewRun(requestID, taskID, workerID, projectID string, now time.Time) *Run {
	return &Run{RequestID: requestID, TaskID: taskID, WorkerID: workerID, ProjectID: projectID,
		State: RunRequested, CreatedAt: now, UpdatedAt: now}
}

// Transition moves r to state to, or refuses with a *TransitionError and
// leaves r unchanged. Use Step for running -> running.
func (r *Run) Transition(to RunState, now time.Time) error {
	if err := CheckRunTransition(r.State, to); err != nil {
		return err
	}
	if to == RunRunning && r.State != RunRunning {
		r.StartedAt = now
	}
	if to.Terminal() {
		r.FinishedAt = now
	}
	r.State, r.UpdatedAt = to, now
	return nil
}

// Fail moves r to failed with an error code and message.
func (r *Run) Fail(code Code, message string, now time.Time) error {
	if err := r.Transition(RunFailed, now); err != nil {
		return err
	}
	r.Error = string(code) + ": " + message
	return nil
}

// Step records one completed step of a running run (running -> running).
func (r *Run) Step(name string, now time.Time) error {
	if r.State != RunRunning {
		return &TransitionError{Machine: "run", From: string(r.State), To: string(RunRunning) + " (step)"}
	}
	r.CurrentStep = name
	r.StepsCompleted++
	if r.StepsTotal > 0 && r.StepsCompleted > r.StepsTotal {
		r.StepsTotal = r.StepsCompleted
	}
	r.UpdatedAt = now
	return nil
}

// WorkerState is the state of a worker. It unifies the seeds' machines:
// the wrapper sets starting, idle, busy, stopping, stopped and failed; the
// spawner sets paused (and failed or stopped for a container that died).
type WorkerState string

const (
	WorkerStarting WorkerState = "starting"
	WorkerIdle     WorkerState = "idle"
	WorkerBusy     WorkerState = "busy"
	WorkerPaused   WorkerState = "paused"
	WorkerStopping WorkerState = "stopping"
	WorkerStopped  WorkerState = "stopped" // terminal: clean stop
	WorkerFailed   WorkerState = "failed"  // terminal: crashed, killed, or dead
	// WorkerHibernated: the worker has no container (idle past
	// HIBERNATE_AFTER or its pause timeout, or its manager stopped); a task
	// on its input makes it a new one (starting).
	WorkerHibernated WorkerState = "hibernated"
)

// WorkerStates lists every worker state.
var WorkerStates = []WorkerState{WorkerStarting, WorkerIdle, WorkerBusy, WorkerPaused, WorkerStopping, WorkerStopped, WorkerFailed, WorkerHibernated}

// WorkerTransitions is the table of allowed worker transitions. A busy
// worker is never paused (its task would be stranded): it goes idle first.
// A paused worker wakes up idle, then takes a task.
var WorkerTransitions = map[WorkerState][]WorkerState{
	WorkerStarting: {WorkerIdle, WorkerStopping, WorkerFailed},
	WorkerIdle:     {WorkerBusy, WorkerPaused, WorkerStopping, WorkerFailed, WorkerHibernated},
	WorkerBusy:     {WorkerIdle, WorkerStopping, WorkerFailed},
	WorkerPaused:   {WorkerIdle, WorkerStopping, WorkerFailed, WorkerHibernated},
	WorkerStopping: {WorkerStopped, WorkerFailed, WorkerHibernated},
	// A hibernated worker is woken as a new container, which starts.
	WorkerHibernated: {WorkerStarting, WorkerStopped},
	WorkerStopped:    {},
	WorkerFailed:     {},
}

// Valid reports whether s is a known worker state.
func (s WorkerState) Valid() bool { _, ok := WorkerTransitions[s]; return ok }

// Terminal reports whether s never changes again.
func (s WorkerState) Terminal() bool { return s == WorkerStopped || s == WorkerFailed }

// CheckWorkerTransition returns nil when from -> to is allowed, and a
// *TransitionError otherwise.
func CheckWorkerTransition(from, to WorkerState) error {
	if slices.Contains(WorkerTransitions[from], to) {
		return nil
	}
	return &TransitionError{Machine: "worker", From: string(from), To: string(to)}
}

// Health is the second dimension of a worker's state. A worker starts
// unknown; its first heartbeat makes it healthy; worker-side failures in
// a row make it degraded (health.go).
type Health string

const (
	HealthUnknown  Health = "unknown"
	HealthHealthy  Health = "healthy"
	HealthDegraded Health = "degraded"
)

// Valid reports whether h is a known health.
func (h Health) Valid() bool {
	return h == HealthUnknown || h == HealthHealthy || h == HealthDegraded
}

// WorkerTransition records one change of a worker's state or health.
type WorkerTransition struct {
	From, To   WorkerState
	FromHealth Health
	ToHealth   Health
	Reason     string
	At         time.Time
	InPrevious time.Duration // time spent in From (with FromHealth)
}

// MaxWorkerHistory bounds the transitions a WorkerMachine keeps.
const MaxWorkerHistory = 64

// WorkerMachine holds a worker's state and health and the history of their
// changes.
type WorkerMachine struct {
	WorkerID string
	State    WorkerState
	Health   Health
	Entered  time.Time          // when the current state (or health) began
	History  []WorkerTransition // oldest first, at most MaxWorkerHistory

	// Streak is the health record of the tasks that ended (health.go).
	Streak FailureStreak
}

// NewWorkerMachine returns a machine in state starting, health unknown.
func NewWorkerMachine(workerID string, now time.Time) *WorkerMachine {
	return &WorkerMachine{WorkerID: workerID, State: WorkerStarting, Health: HealthUnknown, Entered: now}
}

// Transition moves m to state to for reason, or refuses with a
// *TransitionError and leaves m unchanged.
func (m *WorkerMachine) Transition(to WorkerState, reason string, now time.Time) (WorkerTransition, error) {
	if err := CheckWorkerTransition(m.State, to); err != nil {
		return WorkerTransition{}, err
	}
	return m.record(to, m.Health, reason, now), nil
}

// SetHealth changes m's health for reason (to healthy or degraded: no
// worker goes back to unknown). It is refused in a terminal state;
// setting the health it already has records nothing.
func (m *WorkerMachine) SetHealth(h Health, reason string, now time.Time) (WorkerTransition, bool, error) {
	if h != HealthHealthy && h != HealthDegraded {
		return WorkerTransition{}, false, fmt.Errorf("protocol: unknown health %q", h)
	}
	if m.State.Terminal() {
		return WorkerTransition{}, false, &TransitionError{Machine: "worker", From: string(m.State) + "/" + string(m.Health), To: string(m.State) + "/" + string(h)}
	}
	if h == m.Health {
		return WorkerTransition{}, false, nil
	}
	return m.record(m.State, h, reason, now), true, nil
}

func (m *WorkerMachine) record(to WorkerState, h Health, reason string, now time.Time) WorkerTransition {
	t := WorkerTransition{From: m.State, To: to, FromHealth: m.Health, ToHealth: h,
		Reason: reason, At: now, InPrevious: now.Sub(m.Entered)}
	m.History = append(m.History, t)
	if len(m.History) > MaxWorkerHistory {
		m.History = slices.Delete(m.History, 0, len(m.History)-MaxWorkerHistory)
	}
	m.State, m.Health, m.Entered = to, h, now
	return t
}
