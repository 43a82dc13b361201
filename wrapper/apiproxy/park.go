package apiproxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"time"
)

// RateLimitFunc decides what to do with a rate-limited answer (429, or 529
// overloaded) of the upstream: wait until retryAt and send the request
// again (true), or pass the answer on to the agent (false). attempt counts
// the answers of this request so far (1 for the first).
type RateLimitFunc func(status, attempt int, retryAt time.Time) bool

// maxParkBody bounds the request bodies the proxy keeps to send again;
// a larger one is passed through, its rate-limited answer with it.
const maxParkBody = 32 << 20

// parkingTransport sends a request again after a rate-limited answer when
// its RateLimitFunc says so, at the reset time the upstream gave: the
// agent sees one slow answer instead of an error, so its own retries
// (Claude 2.1.197: 10, about a minute in all) do not run out and fail the
// task while the limit has not reset.
type parkingTransport struct {
	next    http.RoundTripper
	limited RateLimitFunc
	now     func() time.Time
}

func (t *parkingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.limited == nil || r.Body == nil || r.ContentLength > maxParkBody {
		return t.next.RoundTrip(r)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxParkBody+1))
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	if len(body) > maxParkBody {
		r.Body = io.NopCloser(bytes.NewReader(body))
		return t.next.RoundTrip(r)
	}
	for attempt := 1; ; attempt++ {
		req := r.Clone(r.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		resp, err := t.next.RoundTrip(req)
		if err != nil || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != 529) {
			return resp, err
		}
		retryAt := RetryAt(resp.Header, t.now(), attempt)
		if !t.limited(resp.StatusCode, attempt, retryAt) {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		timer := time.NewTimer(retryAt.Sub(t.now()))
		select {
		case <-timer.C:
		case <-r.Context().Done(): // the agent gave up the request (it was stopped)
			timer.Stop()
			return nil, r.Context().Err()
		}
	}
}

// RetryAt is when a rate-limited request may be sent again, from the
// answer's headers: retry-after (seconds or an HTTP date), else the
// earliest anthropic-ratelimit-*-reset (RFC 3339) in the future or
// OpenAI's x-ratelimit-reset-requests/-tokens (a duration), else a
// backoff of 2 s doubled per attempt, at most a minute (a 529 overloaded
// answer carries none).
func RetryAt(h http.Header, now time.Time, attempt int) time.Time {
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			return now.Add(time.Duration(s * float64(time.Second)))
		}
		if at, err := http.ParseTime(v); err == nil {
			return at
		}
	}
	var earliest time.Time
	for _, name := range []string{"Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Tokens-Reset",
		"Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Ratelimit-Output-Tokens-Reset"} {
		if at, err := time.Parse(time.RFC3339, h.Get(name)); err == nil && at.After(now) && (earliest.IsZero() || at.Before(earliest)) {
			earliest = at
		}
	}
	// OpenAI's resets are durations from now ("1s", "6m0s", "20ms").
	for _, name := range []string{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens"} {
		if d, err := time.ParseDuration(h.Get(name)); err == nil && d > 0 && (earliest.IsZero() || now.Add(d).Before(earliest)) {
			earliest = now.Add(d)
		}
	}
	if !earliest.IsZero() {
		return earliest
	}
	backoff := 2 * time.Second << min(attempt-1, 5)
	return now.Add(min(backoff, time.Minute))
}
