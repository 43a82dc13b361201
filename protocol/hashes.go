package protocol

import (
	"fmt"
	"strconv"
	"time"
)

// Fields of the worker status hash (Keys.Status). Who writes each is in
// PROTOCOL.md; values are strings, times RFC 3339 in UTC.
const (
	StatusFieldState        = "status"        // WorkerState: wrapper (starting..stopped), spawner (paused, failed)
	StatusFieldHealth       = "health"        // Health: wrapper (unknown, healthy at its first heartbeat, degraded by its tasks), spawner (degraded by its probes)
	StatusFieldStateSince   = "state_since"   // wrapper: when the state (or health) began
	StatusFieldContainer    = "container"     // ContainerStatus: spawner
	StatusFieldStartedAt    = "started_at"    // wrapper, when it started
	StatusFieldUpdatedAt    = "updated_at"    // every writer
	StatusFieldExitCode     = "exit_code"     // spawner, when the container exited
	StatusFieldError        = "error"         // "CODE: message" of the last failure
	StatusFieldRequestID    = "request_id"    // wrapper: the task in flight ("" when idle)
	StatusFieldTaskID       = "task_id"       // wrapper: the task in flight
	StatusFieldOutputStream = "output_stream" // wrapper: where the in-flight task's output goes
	StatusFieldTaskStarted  = "task_started_at"
	StatusFieldAttempt      = "attempt" // wrapper: the in-flight task's attempt (deliveries, hand-overs and retries)
	StatusFieldTasksDone    = "tasks_completed"
	StatusFieldAgentType    = "agent_type"   // spawner, at create
	StatusFieldKind         = "kind"         // spawner, at create
	StatusFieldProjectID    = "project_id"   // spawner, at create
	StatusFieldContainerID  = "container_id" // spawner, at create
	StatusFieldImage        = "image"        // spawner, at create
	StatusFieldCreatedAt    = "created_at"   // spawner, at create
	StatusFieldSpec         = "spec"         // spawner, at create: the WorkerSpec as JSON (what a replacement is made from)
	StatusFieldReplacedBy   = "replaced_by"  // spawner: the worker that replaced this dead one
	StatusFieldReplaces     = "replaces"     // spawner: the dead worker this one replaced
)

// Fields of the worker status hash written by the spawner about its own
// bookkeeping: who made the worker, its replacements, its retirement, its
// pool.
const (
	StatusFieldManagerID    = "manager_id"   // the manager that made the worker
	StatusFieldReplacements = "replacements" // how many incarnations in a row died before completing a task
	// StatusFieldIncarnation counts the containers the worker's identity
	// has had (1 for the first); StatusFieldIncarnatedAt is when the
	// current one was made, StatusFieldIncarnationTasks the worker's
	// tasks_completed then (a task completed since resets replacements).
	StatusFieldIncarnation      = "incarnation"
	StatusFieldIncarnatedAt     = "incarnated_at"
	StatusFieldIncarnationTasks = "incarnation_tasks"
	StatusFieldHibernatedAt     = "hibernated_at" // when it was last hibernated
	StatusFieldRetiredAt        = "retired_at"    // when it left Workers
	StatusFieldRetireReason     = "retire_reason"
	StatusFieldPool             = "pool"       // the warm pool the worker belongs to ("" for none)
	StatusFieldPoolState        = "pool_state" // PoolWarm, PoolAllocated or PoolMember
)

// States of a pool worker (StatusFieldPoolState).
const (
	PoolWarm      = "warm"      // made ahead, paused, waiting for a create
	PoolAllocated = "allocated" // given to a create
	PoolMember    = "member"    // one of a pool's fixed size, running
)

// Fields of the run hash (Keys.Run).
const (
	RunFieldRequestID      = "request_id"
	RunFieldTaskID         = "task_id"
	RunFieldWorkerID       = "worker_id"
	RunFieldProjectID      = "project_id"
	RunFieldAgentSlug      = "agent_slug" // the worker's agent type (claude, droid)
	RunFieldTrigger        = "trigger"    // the task's trigger
	RunFieldStatus         = "status"
	RunFieldCurrentStep    = "current_step"
	RunFieldStepsTotal     = "steps_total"
	RunFieldStepsCompleted = "steps_completed"
	RunFieldError          = "error"
	RunFieldCreatedAt      = "created_at"
	RunFieldStartedAt      = "started_at"
	RunFieldFinishedAt     = "finished_at"
	RunFieldUpdatedAt      = "updated_at"
	// RunFieldSessionID is the agent session the run ran in, written with
	// its terminal state: a task that answers this run continues it.
	RunFieldSessionID = "session_id"
)

// Fields of the usage hashes (Keys.UsageProject, UsageSession, UsageWorker),
// all incremented atomically (HINCRBY, HINCRBYFLOAT for cost).
const (
	UsageFieldInput         = "input"
	UsageFieldOutput        = "output"
	UsageFieldCacheRead     = "cache_read"
	UsageFieldCacheCreation = "cache_creation"
	UsageFieldCostUSD       = "cost_usd"
	UsageFieldTasks         = "tasks"
)

// Fields of the session hash (Keys.Session).
const (
	SessionFieldSessionID     = "session_id"
	SessionFieldAgentType     = "agent_type"
	SessionFieldProjectID     = "project_id"
	SessionFieldContextTokens = "context_tokens"
	SessionFieldContextWindow = "context_window"
	SessionFieldLastActivity  = "last_activity"
	SessionFieldCreatedAt     = "created_at"
	SessionFieldTasks         = "tasks"
	SessionFieldCostUSD       = "cost_usd"
	SessionFieldWorkerID      = "worker_id"         // the worker that holds it (affinity)
	SessionFieldWorkerExpires = "worker_expires_at" // when that affinity lapses (RFC 3339)
	// SessionFieldWorkerExpiresMS is the same instant in Unix milliseconds,
	// which the claim script compares atomically.
	SessionFieldWorkerExpiresMS = "worker_expires_at_ms"
)

// FormatTime is how every hash stores a time: RFC 3339 with nanoseconds,
// in UTC; the zero time is stored as "".
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ParseTime reads a time written by FormatTime; "" is the zero time.
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

// Hash returns the fields of the run hash, ready for HSET.
func (r *Run) Hash() map[string]any {
	return map[string]any{
		RunFieldRequestID:      r.RequestID,
		RunFieldTaskID:         r.TaskID,
		RunFieldWorkerID:       r.WorkerID,
		RunFieldProjectID:      r.ProjectID,
		RunFieldAgentSlug:      r.AgentSlug,
		RunFieldTrigger:        r.Trigger,
		RunFieldStatus:         string(r.State),
		RunFieldCurrentStep:    r.CurrentStep,
		RunFieldStepsTotal:     strconv.Itoa(r.StepsTotal),
		RunFieldStepsCompleted: strconv.Itoa(r.StepsCompleted),
		RunFieldError:          r.Error,
		RunFieldCreatedAt:      FormatTime(r.CreatedAt),
		RunFieldStartedAt:      FormatTime(r.StartedAt),
		RunFieldFinishedAt:     FormatTime(r.FinishedAt),
		RunFieldUpdatedAt:      FormatTime(r.UpdatedAt),
	}
}

// RunFromHash reads a run hash (HGETALL). An empty hash is an error.
func RunFromHash(h map[string]string) (*Run, error) {
	if len(h) == 0 {
		return nil, fmt.Errorf("protocol: run hash is empty")
	}
	r := &Run{
		RequestID: h[RunFieldRequestID], TaskID: h[RunFieldTaskID], WorkerID: h[RunFieldWorkerID],
		ProjectID: h[RunFieldProjectID], AgentSlug: h[RunFieldAgentSlug], Trigger: h[RunFieldTrigger], State: RunState(h[RunFieldStatus]),
		CurrentStep: h[RunFieldCurrentStep], Error: h[RunFieldError],
	}
	if !r.State.Valid() {
		return nil, fmt.Errorf("protocol: run hash field %s: unknown state %q", RunFieldStatus, r.State)
	}
	var err error
	for _, f := range []struct {
		name string
		dst  *int
	}{{RunFieldStepsTotal, &r.StepsTotal}, {RunFieldStepsCompleted, &r.StepsCompleted}} {
		if v := h[f.name]; v != "" {
			if *f.dst, err = strconv.Atoi(v); err != nil {
				return nil, fmt.Errorf("protocol: run hash field %s: %w", f.name, err)
			}
		}
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{RunFieldCreatedAt, &r.CreatedAt}, {RunFieldStartedAt, &r.StartedAt},
		{RunFieldFinishedAt, &r.FinishedAt}, {RunFieldUpdatedAt, &r.UpdatedAt}} {
		if *f.dst, err = ParseTime(h[f.name]); err != nil {
			return nil, fmt.Errorf("protocol: run hash field %s: %w", f.name, err)
		}
	}
	return r, nil
}
