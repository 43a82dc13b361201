package apiproxy

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAt(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		header  map[string]string
		attempt int
		want    time.Duration
	}{
		{"retry-after seconds", map[string]string{"Retry-After": "7"}, 1, 7 * time.Second},
		{"retry-after date", map[string]string{"Retry-After": now.Add(30 * time.Second).Format(http.TimeFormat)}, 1, 30 * time.Second},
		{"earliest ratelimit reset", map[string]string{
			"Anthropic-Ratelimit-Tokens-Reset":   now.Add(40 * time.Second).Format(time.RFC3339),
			"Anthropic-Ratelimit-Requests-Reset": now.Add(20 * time.Second).Format(time.RFC3339)}, 1, 20 * time.Second},
		{"OpenAI's earliest reset, a duration", map[string]string{"X-Ratelimit-Reset-Requests": "6m0s", "X-Ratelimit-Reset-Tokens": "1.5s"}, 1, 1500 * time.Millisecond},
		{"a reset in the past is no reset", map[string]string{"Anthropic-Ratelimit-Requests-Reset": now.Add(-time.Second).Format(time.RFC3339)}, 1, 2 * time.Second},
		{"no header: backoff", nil, 3, 8 * time.Second},
		{"no header: backoff at most a minute", nil, 9, time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := RetryAt(h, now, tt.attempt).Sub(now); got != tt.want {
				t.Fatalf("RetryAt = now + %v, want now + %v", got, tt.want)
			}
		})
	}
}
