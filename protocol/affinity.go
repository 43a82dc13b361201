package protocol

import (
	"strconv"
	"time"
)

// Affinity tells a router which worker should get a project's next task:
// the worker that holds the project's agent session, while its affinity
// has not lapsed. The worker may be paused; a task on its input wakes it.
// fields is the session hash (HGETALL of Keys.Session); ok is false when
// no worker holds the session, or its hold has lapsed, and the router may
// send the task to any worker (which then starts a new session or resumes
// the recorded one).
func Affinity(fields map[string]string, now time.Time) (workerID string, ok bool) {
	workerID = fields[SessionFieldWorkerID]
	if workerID == "" {
		return "", false
	}
	if ms, err := strconv.ParseInt(fields[SessionFieldWorkerExpiresMS], 10, 64); err == nil {
		return workerID, now.UnixMilli() < ms
	}
	if t, err := ParseTime(fields[SessionFieldWorkerExpires]); err == nil && !t.IsZero() {
		return workerID, now.Before(t)
	}
	return "", false
}
