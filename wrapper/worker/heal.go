package worker

import (
	"fmt"
	"net/http"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Failures that heal, or that must not be waited for: the model API's
// answers, as the wrapper's proxy sees them before the agent does.

// onUpstreamError is the model API proxy's hook (apiproxy.Config): a 401
// or 403 fails the task in flight with AUTH_FAILED at once. The agent
// would retry it for minutes (Claude 2.1.197: 10 retries with backoff),
// and no retry with the same credential can succeed.
func (w *Worker) onUpstreamError(status int, _ http.Header) {
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		return
	}
	e := protocol.NewError(protocol.CodeAuthFailed, "the model API refused the credential (HTTP %d); the agent was stopped at the first refusal", status)
	w.mu.Lock()
	cur := w.cur
	stopped := cur != nil && cur.cancel.abortLocked(e)
	w.mu.Unlock()
	if stopped {
		w.log.Warn("model API refused the credential: stopping the task", "request_id", cur.task.RequestID, "http_status", status)
	}
}

// onRateLimit is the model API proxy's rate-limit hook: a 429 or 529 of
// the task in flight parks its model call until the reset time the API
// gave, with a progress warning, when that is within the task's timeout;
// otherwise the task fails RATE_LIMITED at once (the agent is stopped)
// rather than when its own retries run out.
func (w *Worker) onRateLimit(status, attempt int, retryAt time.Time) bool {
	w.mu.Lock()
	cur := w.cur
	if cur == nil {
		w.mu.Unlock()
		return false
	}
	if retryAt.After(cur.deadline) {
		e := protocol.NewError(protocol.CodeRateLimited, "the model API is rate limited (HTTP %d, attempt %d) until %s, past the task's timeout",
			status, attempt, retryAt.UTC().Format(time.RFC3339))
		stopped := cur.cancel.abortLocked(e)
		w.mu.Unlock()
		if stopped {
			w.log.Warn("model API rate limited past the task's timeout: stopping the task", "request_id", cur.task.RequestID, "retry_at", retryAt)
		}
		return false
	}
	cur.parkedUntil = retryAt
	w.mu.Unlock()
	wait := time.Until(retryAt).Round(time.Millisecond)
	w.pushProgress(cur, fmt.Sprintf("model API rate limited (HTTP %d, attempt %d): the task is parked until %s (%v)",
		status, attempt, retryAt.UTC().Format(time.RFC3339), wait), nil, "", protocol.LevelWarning)
	return true
}

// parked reports whether the model call of the task in flight is parked
// by the proxy (or was, a minute ago at most): the agent's silence then is
// no stall. It looks at the task in flight, not at one task, since the
// persistent process keeps the spec of the task that started it.
func (w *Worker) parked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur != nil && w.now().Before(w.cur.parkedUntil.Add(time.Minute))
}

// aborted returns the error the wrapper interrupted cur for, if any.
func (w *Worker) aborted(cur *current) *protocol.Error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return cur.cancel.abort
}
