package worker

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// statusReporter tells Redis the worker's state as it changes (state.go
// owns the machine): every change is a state_changed lifecycle event, an
// entry of the worker's capped history list (Keys.StatusHistory) and, for
// a developer worker, its place in the developer idle set (affinity.go).
// The status hash carries the state, the health and since when (push).
// It also asks the spawner for a pause once the worker is idle again.
type statusReporter struct {
	statusReporterParams
}

// statusReporterParams are what the status reporter is built from: its
// collaborators and settings, none of them the Worker.
type statusReporterParams struct {
	state            *workerState
	pub              *publisher
	log              *slog.Logger
	now              func() time.Time
	workerID         string
	developer        bool // a developer worker: it keeps its place in the idle set
	pauseAfterOutput bool
	controlStream    string
}

func newStatusReporter(p statusReporterParams) *statusReporter {
	return &statusReporter{statusReporterParams: p}
}

// published publishes one change of the machine; workerState calls it,
// in the order of the changes.
func (s *statusReporter) published(tr protocol.WorkerTransition) {
	rec := tr.Record()
	s.pub.lifecycle(protocol.EventStateChanged, "", "", rec.Detail())
	if doc, err := json.Marshal(rec); err == nil {
		s.pub.history(doc)
	}
	if tr.FromHealth != tr.ToHealth {
		s.log.Info("worker health changed", "from", tr.FromHealth, "to", tr.ToHealth, "reason", tr.Reason)
	}
	s.markIdle()
}

// transition moves the worker's state machine and writes the status hash.
func (s *statusReporter) transition(to protocol.WorkerState, reason string) {
	if err := s.state.transition(to, reason); err != nil {
		s.log.Error("worker state", "err", err)
		return
	}
	s.push(map[string]any{})
}

// push writes fields of the status hash, with the worker's state, health
// and since when.
func (s *statusReporter) push(fields map[string]any) {
	s.pub.status(stateFields(s.state.snapshot(), fields))
}

// taskEnded records how a task ended in the worker's health and
// publishes a change. ran: its agent ran.
func (s *statusReporter) taskEnded(o protocol.Output, ran bool) {
	code := protocol.Code("")
	if o.Status == protocol.StatusFailed && o.Error != nil {
		code = o.Error.Code
	} else if o.Status == protocol.StatusCancelled {
		code = protocol.CodeCancelled
	}
	if s.state.taskEnded(code, ran) {
		s.push(map[string]any{})
	}
}

// degraded reports whether the worker is degraded now.
func (s *statusReporter) degraded() bool {
	return s.state.snapshot().health == protocol.HealthDegraded
}

// markIdle keeps a developer worker's place in the developer idle set:
// in it, scored with the time, while idle, not stopping and not
// degraded; out of it otherwise. Each heartbeat refreshes the score.
func (s *statusReporter) markIdle() {
	if !s.developer {
		return
	}
	st := s.state.snapshot()
	s.pub.idle(st.state == protocol.WorkerIdle && !st.stopping && st.health != protocol.HealthDegraded)
}

// requestPause asks the spawner to pause this worker, now idle: the
// wrapper never pauses itself. reason says what it just did.
func (s *statusReporter) requestPause(reqID, taskID, reason string) {
	if !s.pauseAfterOutput || s.state.snapshot().stopping {
		return
	}
	c := protocol.Control{Action: protocol.ControlPause, WorkerID: s.workerID,
		Reason: reason, RequestID: reqID, Timestamp: s.now()}
	doc, err := c.Encode()
	if err != nil {
		return
	}
	s.pub.entry("control pause", s.controlStream, doc)
	s.pub.lifecycle(protocol.EventPauseRequested, reqID, taskID, map[string]any{"reason": c.Reason})
}

// stateFields are the status hash's fields of the machine.
func stateFields(s snapshot, fields map[string]any) map[string]any {
	fields[protocol.StatusFieldState] = string(s.state)
	fields[protocol.StatusFieldHealth] = string(s.health)
	fields[protocol.StatusFieldStateSince] = protocol.FormatTime(s.since.UTC().Truncate(time.Millisecond))
	return fields
}
