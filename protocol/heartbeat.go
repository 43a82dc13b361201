package protocol

import "time"

// Heartbeat statuses.
const (
	HeartbeatIdle     = "idle"
	HeartbeatBusy     = "busy"
	HeartbeatStopping = "stopping"
)

// HeartbeatTTLIntervals is how many heartbeat intervals the heartbeat key
// lives: a worker is dead after missing this many beats in a row.
const HeartbeatTTLIntervals = 3

// Heartbeat is the value of a worker's heartbeat key, which the wrapper
// rewrites every interval with a TTL of HeartbeatTTLIntervals intervals.
type Heartbeat struct {
	V         int    `json:"v"`
	Type      Type   `json:"type"`
	WorkerID  string `json:"worker_id"`
	Status    string `json:"status"` // idle, busy or stopping
	RequestID string `json:"request_id,omitempty"`
	TaskID    string `json:"task_id,omitempty"`
	// RSSBytes is the resident memory of the wrapper and its agent.
	RSSBytes int64 `json:"rss_bytes"`
	// CPUPercent is the CPU the wrapper and its agent used since the last
	// beat, in percent of one core.
	CPUPercent     float64   `json:"cpu_percent"`
	TasksCompleted int64     `json:"tasks_completed"`
	IntervalMS     int64     `json:"interval_ms"`
	Timestamp      time.Time `json:"timestamp"`
}

// Validate checks every field of h.
func (h Heartbeat) Validate() error {
	if err := checkID("worker_id", h.WorkerID, true); err != nil {
		return err
	}
	switch h.Status {
	case HeartbeatIdle, HeartbeatBusy, HeartbeatStopping:
	default:
		return fieldErr("status", "is %q, want idle, busy or stopping", h.Status)
	}
	switch {
	case h.RSSBytes < 0:
		return fieldErr("rss_bytes", "negative")
	case h.CPUPercent < 0:
		return fieldErr("cpu_percent", "negative")
	case h.TasksCompleted < 0:
		return fieldErr("tasks_completed", "negative")
	case h.IntervalMS <= 0:
		return fieldErr("interval_ms", "must be positive")
	case h.Timestamp.IsZero():
		return fieldErr("timestamp", "required")
	}
	return nil
}

// Encode returns the JSON document of h, with v and type set.
func (h Heartbeat) Encode() ([]byte, error) {
	h.V, h.Type = Version, TypeHeartbeat
	return encode(h)
}

// DecodeHeartbeat parses and validates a heartbeat document.
func DecodeHeartbeat(data []byte) (Heartbeat, error) {
	var h Heartbeat
	err := decode(TypeHeartbeat, data, &h, func() error { return h.Validate() })
	return h, err
}
