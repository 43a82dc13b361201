package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Retries of a failed task. A re-run of a coding agent has side effects
// (files changed, commits, pull requests), so a task is retried only when
// it asks, with a retry policy, and only on a failure whose code is
// retryable (Code.Retryable).
const (
	// DefaultRetryAttempts is how many attempts a task that asks for
	// retries without numbers gets: the first and three retries.
	DefaultRetryAttempts = 4
	// MaxRetryAttempts bounds a task's attempts.
	MaxRetryAttempts = 10
	// MaxRetryBackoffMS bounds one wait between attempts (10 minutes).
	MaxRetryBackoffMS = 10 * 60 * 1000
	// EnvRetryAttempts and EnvRetryBackoffMS name the variables of the
	// wrapper and the worker-manager that set the policy of a task that
	// asks for retries without numbers; the manager passes its values to
	// every worker it makes.
	EnvRetryAttempts  = "RETRY_ATTEMPTS"
	EnvRetryBackoffMS = "RETRY_BACKOFF_MS"
)

// DefaultRetryBackoffMS are the waits before the second, third and fourth
// attempts (exponential: 1 s, 2 s, 4 s).
var DefaultRetryBackoffMS = []int{1000, 2000, 4000}

// RetryPolicy is a task's ask to be retried: at most Attempts attempts in
// all (the first included), waiting BackoffMS[n-2] milliseconds before
// attempt n (the last value repeats). A zero field takes the operator's
// default (RETRY_ATTEMPTS, RETRY_BACKOFF_MS).
type RetryPolicy struct {
	Attempts  int   `json:"attempts,omitempty"`
	BackoffMS []int `json:"backoff_ms,omitempty"`
}

// DefaultRetryPolicy is the policy of a task that asks without numbers
// when the operator set none.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Attempts: DefaultRetryAttempts, BackoffMS: append([]int(nil), DefaultRetryBackoffMS...)}
}

// Resolve fills the fields p leaves zero from def.
func (p RetryPolicy) Resolve(def RetryPolicy) RetryPolicy {
	if p.Attempts == 0 {
		p.Attempts = def.Attempts
	}
	if len(p.BackoffMS) == 0 {
		p.BackoffMS = def.BackoffMS
	}
	return p
}

// Allows reports whether a failure with code, on attempt (1 for the
// first), is retried.
func (p RetryPolicy) Allows(attempt int, code Code) bool {
	return code.Retryable() && attempt < p.Attempts
}

// Backoff is the wait before attempt (2 for the first retry).
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	if len(p.BackoffMS) == 0 || attempt < 2 {
		return 0
	}
	i := min(attempt-2, len(p.BackoffMS)-1)
	return time.Duration(p.BackoffMS[i]) * time.Millisecond
}

// Validate checks p's numbers.
func (p RetryPolicy) Validate(path string) error {
	if p.Attempts < 0 || p.Attempts > MaxRetryAttempts {
		return fieldErr(path+".attempts", "is %d, want 1 to %d (0: the default)", p.Attempts, MaxRetryAttempts)
	}
	if len(p.BackoffMS) > MaxRetryAttempts {
		return fieldErr(path+".backoff_ms", "has %d values, at most %d", len(p.BackoffMS), MaxRetryAttempts)
	}
	for i, ms := range p.BackoffMS {
		if ms < 0 || ms > MaxRetryBackoffMS {
			return fieldErr(fmt.Sprintf("%s.backoff_ms[%d]", path, i), "is %d, want 0 to %d", ms, MaxRetryBackoffMS)
		}
	}
	return nil
}

// ParseRetryAttempts reads RETRY_ATTEMPTS: 1 to MaxRetryAttempts.
func ParseRetryAttempts(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > MaxRetryAttempts {
		return 0, fmt.Errorf("%q: want a whole number from 1 to %d", s, MaxRetryAttempts)
	}
	return n, nil
}

// ParseRetryBackoffMS reads RETRY_BACKOFF_MS: milliseconds separated by
// commas ("1000,2000,4000").
func ParseRetryBackoffMS(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > MaxRetryBackoffMS {
			return nil, fmt.Errorf("%q: want milliseconds from 0 to %d, separated by commas", f, MaxRetryBackoffMS)
		}
		out = append(out, n)
	}
	if len(out) == 0 || len(out) > MaxRetryAttempts {
		return nil, fmt.Errorf("want 1 to %d values", MaxRetryAttempts)
	}
	return out, nil
}

// FormatRetryBackoffMS writes backoff as RETRY_BACKOFF_MS reads it.
func FormatRetryBackoffMS(backoff []int) string {
	s := make([]string, len(backoff))
	for i, ms := range backoff {
		s[i] = strconv.Itoa(ms)
	}
	return strings.Join(s, ",")
}
