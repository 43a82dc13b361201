package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Every change of the worker's state machine (state.go) is published
// here: a state_changed lifecycle event, an entry of the worker's capped
// history list (Keys.StatusHistory), and, for a developer worker, its
// place in the developer idle set (affinity.go). The status hash carries
// the state, the health and since when (pushStatus).

// publishTransition publishes one change of the machine.
func (w *Worker) publishTransition(tr protocol.WorkerTransition) {
	rec := tr.Record()
	w.pub.lifecycle(protocol.EventStateChanged, "", "", rec.Detail())
	if doc, err := json.Marshal(rec); err == nil {
		key := w.cfg.Keys.StatusHistory(w.cfg.WorkerID)
		w.pub.out.Push("history", func(ctx context.Context) error {
			return w.rdb.PushCapped(ctx, key, doc, protocol.MaxStatusHistory)
		})
	}
	if tr.FromHealth != tr.ToHealth {
		w.log.Info("worker health changed", "from", tr.FromHealth, "to", tr.ToHealth, "reason", tr.Reason)
	}
	w.markIdle()
}

// noteTaskEnded records how a task ended in the worker's health and
// publishes a change. ran: its agent ran.
func (w *Worker) noteTaskEnded(o protocol.Output, ran bool) {
	code := protocol.Code("")
	if o.Status == protocol.StatusFailed && o.Error != nil {
		code = o.Error.Code
	} else if o.Status == protocol.StatusCancelled {
		code = protocol.CodeCancelled
	}
	if w.state.taskEnded(code, ran) {
		w.pushStatus(map[string]any{})
	}
}

// beaten runs after each heartbeat written (doc, at key): the first makes
// the worker healthy; a degraded worker whose cool-down passed checks its
// health with a round trip (the beat read back as written) and is healthy
// again when it passes.
func (w *Worker) beaten(ctx context.Context, key string, doc []byte) {
	if w.state.beat() {
		w.pushStatus(map[string]any{})
	}
	cooldown := w.cfg.DegradedCooldown
	if cooldown <= 0 {
		cooldown = protocol.DefaultHealthCooldown
	}
	if w.state.healthCheckDue(cooldown) {
		got, err := w.rdb.Get(ctx, key)
		if err == nil && bytes.Equal(got, doc) && w.state.healthCheckPassed("heartbeat round trip after the cool-down") {
			w.pushStatus(map[string]any{})
		}
	}
	w.markIdle()
}

// degraded reports whether the worker is degraded now.
func (w *Worker) degraded() bool { return w.state.snapshot().health == protocol.HealthDegraded }

// stateFields are the status hash's fields of the machine.
func stateFields(s snapshot, fields map[string]any) map[string]any {
	fields[protocol.StatusFieldState] = string(s.state)
	fields[protocol.StatusFieldHealth] = string(s.health)
	fields[protocol.StatusFieldStateSince] = protocol.FormatTime(s.since.UTC().Truncate(time.Millisecond))
	return fields
}
