package spawner

import (
	"context"

	"github.com/agentvisor/agentvisor/protocol"
)

// A dead worker's task that asked for retries (protocol.RetryPolicy) is
// not answered while its policy leaves an attempt: it goes back on the
// input, and the worker's next incarnation (the same id, incarnation.go)
// runs it on the next attempt. A death that brings no new incarnation (a
// takeover, a lost host) brings a replacement when the task in flight
// asked for retries, whatever killed it; the same bounds,
// MAX_REPLACEMENTS and REPLACE_BACKOFF, apply either way. A task that did
// not ask is answered, as a re-run has side effects.

// retriesInFlight reports whether the task a dead worker had in flight
// asked for retries.
func (a *answers) retriesInFlight(ctx context.Context, id string, h map[string]string, input, group string) bool {
	inFlight := h[protocol.StatusFieldRequestID]
	if inFlight == "" {
		return false
	}
	held, err := a.rdb.Held(ctx, input, group, id)
	if err != nil {
		return false
	}
	for _, e := range held {
		if e.OK && e.Task.RequestID == inFlight {
			return e.Task.Retry != nil
		}
	}
	return false
}

// handsOn reports whether a retired worker's task (its entry held) goes
// back on the input rather than being answered, on attempt+1: a developer
// task with a retryable code, to another developer worker, up to
// MaxAttempts (or the attempts its retry policy asks, if more); a
// long-lived worker's task that asked for retries, for the worker's next
// incarnation or replacement, while its policy leaves an attempt.
func (a *answers) handsOn(kind protocol.Kind, t protocol.Task, code protocol.Code, attempt int, r retirement) bool {
	policy, asked := t.RetryPolicy(a.cfg.Retry)
	if kind == protocol.KindDeveloper {
		return code.Retryable() && (attempt < MaxAttempts || (asked && policy.Allows(attempt, code)))
	}
	return asked && r.replacing && policy.Allows(attempt, code)
}
