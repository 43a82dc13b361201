package protocol

import "time"

// Event names a lifecycle event.
type Event string

// Events the wrapper publishes.
const (
	EventStarted       Event = "started"        // the wrapper is up and reads its input
	EventTaskStarted   Event = "task_started"   // a task's agent process started
	EventTaskCompleted Event = "task_completed" // a task ended complete or blocked
	EventTaskFailed    Event = "task_failed"    // a task ended failed
	EventTaskCancelled Event = "task_cancelled" // a cancel ended a task (queued or running)
	EventBudgetWarning Event = "budget_warning" // a task made its project's spending cross the budget's warning threshold
	// EventUsage: model calls that belong to no task's output (a retiring
	// session's summary turn, a cancelled task's wind-down) were counted
	// in the project's usage: detail project_id, input, output,
	// cache_read, cache_creation (tokens) and cost_usd.
	EventUsage          Event = "usage"
	EventPauseRequested Event = "pause_requested" // the wrapper asked the spawner to pause it
	EventStopping       Event = "stopping"        // shutdown began (SIGTERM)
	EventStopped        Event = "stopped"         // clean shutdown finished
	EventFailed         Event = "failed"          // the wrapper itself failed
	// EventStateChanged: the worker's state or health changed (detail:
	// a TransitionRecord: from, to, from_health, to_health, reason,
	// in_previous_ms). The spawner publishes it too, for the state
	// changes it makes (paused, woken, failed, stopped).
	EventStateChanged Event = "state_changed"
	// EventHandedOff: a developer worker gave a task it read to the
	// worker that holds its project's session (detail: to, project_id).
	EventHandedOff Event = "task_handed_off"
)

// Events the spawner publishes.
const (
	EventCreated   Event = "created"   // container created and started
	EventQueued    Event = "queued"    // a create waits for a slot
	EventPaused    Event = "paused"    // container paused
	EventUnpaused  Event = "unpaused"  // container unpaused
	EventDied      Event = "died"      // container exited
	EventOOM       Event = "oom"       // the OOM killer fired in the container
	EventDead      Event = "dead"      // heartbeat expired while not paused
	EventDegraded  Event = "degraded"  // health probes failing
	EventRecovered Event = "recovered" // health probes pass again
	EventRemoved   Event = "removed"   // container removed
	// EventReplaceFailed: a worker that kept dying was not replaced again
	// (detail: code REPLACE_LIMIT, replacements) or its replacement could
	// not be made (detail: code, error).
	EventReplaceFailed Event = "replace_failed"
	// EventAllocated: a warm pool worker was given to a create (detail:
	// pool, wait_ms).
	EventAllocated Event = "allocated"
	// EventRecycled: a pool worker that served recycle_after tasks is
	// retired and replaced (detail: pool, tasks).
	EventRecycled Event = "recycled"
	// EventNetworkChanged: a sealed worker's egress allowlist was replaced
	// (set_network; detail: allow).
	EventNetworkChanged Event = "network_changed"
	// EventHibernated: the worker's container was removed, its identity
	// kept (detail: reason idle, pause_timeout or shutdown); a task on its
	// input wakes it (created, detail.woken).
	EventHibernated Event = "hibernated"
	// EventImageBuild: a create builds the worker's image (detail: image,
	// the tag; phase, project for the project's own Dockerfile, layer for
	// the wrapper and agent put on it; lines, the build log's lines since
	// the last such event; done and took_ms on the phase's last one).
	EventImageBuild Event = "image_build"
)

// EventOperatorAction is published by the operator's dashboard (source
// operator) when a person acted on a worker through it: detail.action
// (cancel, message, allow, deny, pause, resume, delete), detail.operator
// (who: the name given at login, or "ops"), and what the action wrote
// (detail.permission_id, detail.command_id, detail.code on failure).
const EventOperatorAction Event = "operator_action"

var events = map[Event]bool{
	EventStarted: true, EventTaskStarted: true, EventTaskCompleted: true, EventTaskFailed: true, EventTaskCancelled: true, EventBudgetWarning: true, EventUsage: true,
	EventPauseRequested: true, EventStopping: true, EventStopped: true, EventFailed: true, EventStateChanged: true, EventHandedOff: true,
	EventCreated: true, EventQueued: true, EventPaused: true, EventUnpaused: true, EventDied: true,
	EventOOM: true, EventDead: true, EventDegraded: true, EventRecovered: true, EventRemoved: true, EventReplaceFailed: true, EventAllocated: true, EventRecycled: true, EventHostLost: true, EventNetworkChanged: true, EventOperatorAction: true, EventHibernated: true, EventImageBuild: true,
}

// Valid reports whether e is a known event.
func (e Event) Valid() bool { return events[e] }

// Sources of lifecycle events.
const (
	SourceWrapper = "wrapper"
	SourceSpawner = "spawner"
	// SourceOperator: a person, through the dashboard (operator_action).
	SourceOperator = "operator"
)

// Lifecycle is one entry of the lifecycle stream.
type Lifecycle struct {
	V         int       `json:"v"`
	Type      Type      `json:"type"`
	WorkerID  string    `json:"worker_id"`
	Event     Event     `json:"event"`
	Source    string    `json:"source"`
	Timestamp time.Time `json:"timestamp"`
	RequestID string    `json:"request_id,omitempty"`
	TaskID    string    `json:"task_id,omitempty"`
	// Detail carries event-specific facts (exit_code, error, reason, ...).
	Detail map[string]any `json:"detail,omitempty"`
	// Host is the host whose engine runs the worker (fleet.go).
	Host string `json:"host,omitempty"`
}

// Validate checks every field of l.
func (l Lifecycle) Validate() error {
	if err := checkID("worker_id", l.WorkerID, true); err != nil {
		return err
	}
	if !l.Event.Valid() {
		return fieldErr("event", "unknown event %q", l.Event)
	}
	if l.Source != SourceWrapper && l.Source != SourceSpawner && l.Source != SourceOperator {
		return fieldErr("source", "is %q, want wrapper, spawner or operator", l.Source)
	}
	if l.Timestamp.IsZero() {
		return fieldErr("timestamp", "required")
	}
	if err := checkID("request_id", l.RequestID, false); err != nil {
		return err
	}
	return checkID("task_id", l.TaskID, false)
}

// Encode returns the JSON document of l, with v and type set.
func (l Lifecycle) Encode() ([]byte, error) {
	l.V, l.Type = Version, TypeLifecycle
	return encode(l)
}

// DecodeLifecycle parses and validates a lifecycle document.
func DecodeLifecycle(data []byte) (Lifecycle, error) {
	var l Lifecycle
	err := decode(TypeLifecycle, data, &l, func() error { return l.Validate() })
	return l, err
}

// RemovedReason is why a worker was retired: the detail.reason of its
// "removed" event.
type RemovedReason string

// Why a worker is retired.
const (
	RemovedDeleted      RemovedReason = "deleted"       // a delete command
	RemovedPauseTimeout RemovedReason = "pause_timeout" // paused longer than PAUSE_TIMEOUT
	RemovedDied         RemovedReason = "died"          // its container ended on its own (exit code, OOM)
	RemovedExited       RemovedReason = "exited"        // its container stopped cleanly without being asked
	RemovedDead         RemovedReason = "dead"          // its heartbeat expired while not paused
	RemovedGone         RemovedReason = "gone"          // its container was found missing
	RemovedStuck        RemovedReason = "stuck"         // its container never started, or a create failed half way
	RemovedTakeover     RemovedReason = "takeover"      // found dead while its manager or host was gone
	RemovedHostLost     RemovedReason = "host_lost"     // its host was lost
	RemovedGaveWay      RemovedReason = "gave_way"      // a warm pool worker gave its slot to a create
	RemovedDegraded     RemovedReason = "degraded"      // idle and degraded by its own tasks for REPLACE_DEGRADED_AFTER
	RemovedRecycled     RemovedReason = "recycled"      // a pool worker that served recycle_after tasks
)
