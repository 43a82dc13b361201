package worker

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Failures that heal, or that must not be waited for: the model API's
// answers, as the wrapper's proxy sees them before the agent does.
type healer struct {
	state *workerState
	pub   *publisher
	log   *slog.Logger
	now   func() time.Time
}

// upstreamError is the model API proxy's hook (apiproxy.Config): a 401
// or 403 fails the task in flight with AUTH_FAILED at once. The agent
// would retry it for minutes (Claude 2.1.197: 10 retries with backoff),
// and no retry with the same credential can succeed.
func (h *healer) upstreamError(status int, _ http.Header) {
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		return
	}
	e := protocol.NewError(protocol.CodeAuthFailed, "the model API refused the credential (HTTP %d); the agent was stopped at the first refusal", status)
	if cur := h.state.current(); cur != nil && cur.cancel.abortWith(e) {
		h.log.Warn("model API refused the credential: stopping the task", "request_id", cur.task.RequestID, "http_status", status)
	}
}

// rateLimit is the model API proxy's rate-limit hook: a 429 or 529 of
// the task in flight parks its model call until the reset time the API
// gave, with a progress warning, when that is within the task's timeout;
// otherwise the task fails RATE_LIMITED at once (the agent is stopped)
// rather than when its own retries run out.
func (h *healer) rateLimit(status, attempt int, retryAt time.Time) bool {
	cur := h.state.current()
	if cur == nil {
		return false
	}
	cur.mu.Lock()
	deadline := cur.deadline // a retry moves it
	cur.mu.Unlock()
	if retryAt.After(deadline) {
		e := protocol.NewError(protocol.CodeRateLimited, "the model API is rate limited (HTTP %d, attempt %d) until %s, past the task's timeout",
			status, attempt, retryAt.UTC().Format(time.RFC3339))
		if cur.cancel.abortWith(e) {
			h.log.Warn("model API rate limited past the task's timeout: stopping the task", "request_id", cur.task.RequestID, "retry_at", retryAt)
		}
		return false
	}
	cur.mu.Lock()
	cur.parkedUntil = retryAt
	cur.mu.Unlock()
	wait := time.Until(retryAt).Round(time.Millisecond)
	h.pub.progress(cur, fmt.Sprintf("model API rate limited (HTTP %d, attempt %d): the task is parked until %s (%v)",
		status, attempt, retryAt.UTC().Format(time.RFC3339), wait), protocol.LevelWarning)
	return true
}

// parked reports whether the model call of the task in flight is parked
// by the proxy (or was, a minute ago at most): the agent's silence then is
// no stall. It looks at the task in flight, not at one task, since the
// persistent process keeps the spec of the task that started it.
func (h *healer) parked() bool {
	cur := h.state.current()
	if cur == nil {
		return false
	}
	cur.mu.Lock()
	defer cur.mu.Unlock()
	return h.now().Before(cur.parkedUntil.Add(time.Minute))
}
