package protocol

import (
	"encoding/json"
	"fmt"
	"time"
)

// workerSide are the failure codes that say the worker failed, not its
// task: its agent crashed, stalled or was killed, the wrapper hit a bug,
// its MCP servers or its credential do not work. The same task may
// succeed on another worker. A task's own failures (TASK_FAILED,
// AGENT_TIMEOUT, NO_STOP_OUTPUT, BUDGET_EXCEEDED, CANCELLED), and what
// every worker shares (RATE_LIMITED, UPSTREAM_UNAVAILABLE), are not.
var workerSide = map[Code]bool{
	CodeAgentCrashed:   true,
	CodeAgentStalled:   true,
	CodeInternalError:  true,
	CodeOOMKilled:      true,
	CodeKilled:         true,
	CodeMCPUnavailable: true,
	CodeAuthFailed:     true,
}

// WorkerSide reports whether a task that failed with c counts against
// its worker's health.
func (c Code) WorkerSide() bool { return workerSide[c] }

// DegradeAfterFailures is how many tasks in a row that fail with a
// worker-side code make a worker degraded.
const DegradeAfterFailures = 3

// DefaultHealthCooldown is how long a degraded worker waits before its
// health check (DEGRADED_COOLDOWN); each degradation in a row without a
// task that succeeded doubles it, up to MaxHealthCooldown.
const (
	DefaultHealthCooldown = 60 * time.Second
	MaxHealthCooldown     = 16 * DefaultHealthCooldown
)

// FailureStreak is a worker's health record of its tasks: the worker-side
// failures in a row, and the degradations since its last task that
// succeeded.
type FailureStreak struct {
	Failures     int
	Degradations int
	DegradedAt   time.Time // zero unless degraded
}

// TaskEnded records a task that ended with code ("" when it did not
// fail; ran: its agent ran) and moves m's health: DegradeAfterFailures
// worker-side failures in a row make it degraded; a task whose agent ran
// and that failed otherwise resets the count, and one that succeeded
// makes a degraded worker healthy again. A task refused before its agent
// ran (its budget, a cancel) counts for nothing. changed reports whether
// the health changed.
func (m *WorkerMachine) TaskEnded(code Code, ran bool, now time.Time) (tr WorkerTransition, changed bool) {
	if m.State.Terminal() || (!ran && !code.WorkerSide()) {
		return WorkerTransition{}, false
	}
	if !code.WorkerSide() {
		m.Streak.Failures = 0
		if code == "" {
			m.Streak.Degradations = 0
			if m.Health == HealthDegraded {
				m.Streak.DegradedAt = time.Time{}
				tr, changed, _ = m.SetHealth(HealthHealthy, "health check passed: a task succeeded", now)
			}
		}
		return tr, changed
	}
	m.Streak.Failures++
	if m.Streak.Failures < DegradeAfterFailures || m.Health == HealthDegraded {
		return WorkerTransition{}, false
	}
	m.Streak.Degradations++
	m.Streak.DegradedAt = now
	tr, changed, _ = m.SetHealth(HealthDegraded,
		fmt.Sprintf("%d tasks in a row failed on the worker's side (last %s)", m.Streak.Failures, code), now)
	return tr, changed
}

// Cooldown is how long a degraded worker waits before its health check:
// base, doubled for each degradation in a row after the first, at most
// MaxHealthCooldown.
func (s FailureStreak) Cooldown(base time.Duration) time.Duration {
	d := base
	for i := 1; i < s.Degradations && d < MaxHealthCooldown; i++ {
		d *= 2
	}
	return min(d, max(MaxHealthCooldown, base))
}

// HealthCheckDue reports whether a degraded m's cool-down has passed.
func (m *WorkerMachine) HealthCheckDue(base time.Duration, now time.Time) bool {
	return m.Health == HealthDegraded && !now.Before(m.Streak.DegradedAt.Add(m.Streak.Cooldown(base)))
}

// HealthCheckPassed makes a degraded m healthy again after its health
// check passed. It is on probation: one more worker-side failure before a
// task succeeds degrades it again.
func (m *WorkerMachine) HealthCheckPassed(check string, now time.Time) (WorkerTransition, bool) {
	if m.Health != HealthDegraded {
		return WorkerTransition{}, false
	}
	tr, changed, _ := m.SetHealth(HealthHealthy, "health check passed: "+check, now)
	if changed {
		m.Streak.Failures, m.Streak.DegradedAt = DegradeAfterFailures-1, time.Time{}
	}
	return tr, changed
}

// MaxStatusHistory bounds a worker's transition history in Redis
// (Keys.StatusHistory, newest first).
const MaxStatusHistory = 20

// TransitionRecord is one change of a worker's state or health as it is
// published: an entry of the worker's history list, and the detail of its
// state_changed lifecycle event.
type TransitionRecord struct {
	From         WorkerState `json:"from"`
	To           WorkerState `json:"to"`
	FromHealth   Health      `json:"from_health,omitempty"`
	ToHealth     Health      `json:"to_health,omitempty"`
	Reason       string      `json:"reason"`
	At           time.Time   `json:"at"`
	InPreviousMS int64       `json:"in_previous_ms"` // time spent in From (with FromHealth)
}

// Record returns t as published.
func (t WorkerTransition) Record() TransitionRecord {
	return TransitionRecord{From: t.From, To: t.To, FromHealth: t.FromHealth, ToHealth: t.ToHealth,
		Reason: t.Reason, At: t.At.UTC(), InPreviousMS: t.InPrevious.Milliseconds()}
}

// Detail returns r as a lifecycle event's detail.
func (r TransitionRecord) Detail() map[string]any {
	d := map[string]any{"from": string(r.From), "to": string(r.To), "reason": r.Reason, "in_previous_ms": r.InPreviousMS}
	if r.FromHealth != "" {
		d["from_health"] = string(r.FromHealth)
	}
	if r.ToHealth != "" {
		d["to_health"] = string(r.ToHealth)
	}
	return d
}

// DecodeTransitionRecord parses one entry of a worker's history list.
func DecodeTransitionRecord(data []byte) (TransitionRecord, error) {
	var r TransitionRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("protocol: transition record: %w", err)
	}
	if !r.From.Valid() || !r.To.Valid() {
		return r, fmt.Errorf("protocol: transition record: unknown state %q -> %q", r.From, r.To)
	}
	return r, nil
}
