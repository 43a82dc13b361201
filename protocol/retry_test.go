package protocol

import (
	"strings"
	"testing"
	"time"
)

func TestRetryPolicy(t *testing.T) {
	def := DefaultRetryPolicy()
	if def.Attempts != 4 || len(def.BackoffMS) != 3 || def.BackoffMS[0] != 1000 || def.BackoffMS[2] != 4000 {
		t.Fatalf("default policy %+v, want the design's 3 retries after 1 s, 2 s, 4 s", def)
	}
	asked := NewTask("r", "p")
	asked.Retry = &RetryPolicy{}
	p, ok := asked.RetryPolicy(def)
	if !ok || p.Attempts != 4 || len(p.BackoffMS) != 3 {
		t.Fatalf("a task that asks without numbers: %+v %v", p, ok)
	}
	if _, ok := NewTask("r", "p").RetryPolicy(def); ok {
		t.Fatal("a task that did not ask has a retry policy")
	}
	own := RetryPolicy{Attempts: 2}.Resolve(def)
	if own.Attempts != 2 || own.Backoff(2) != time.Second {
		t.Fatalf("a task's own attempts with the default backoff: %+v", own)
	}
	for _, c := range []struct {
		name    string
		attempt int
		code    Code
		want    bool
	}{
		{"transient, first attempt", 1, CodeRateLimited, true},
		{"crash, third attempt", 3, CodeAgentCrashed, true},
		{"last attempt", 4, CodeAgentError, false},
		{"not retryable", 1, CodeTaskFailed, false},
		{"auth", 1, CodeAuthFailed, false},
		{"cancelled", 1, CodeCancelled, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := def.Allows(c.attempt, c.code); got != c.want {
				t.Errorf("Allows(%d, %s) = %v", c.attempt, c.code, got)
			}
		})
	}
	for attempt, want := range map[int]time.Duration{1: 0, 2: time.Second, 3: 2 * time.Second, 4: 4 * time.Second, 7: 4 * time.Second} {
		if got := def.Backoff(attempt); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", attempt, got, want)
		}
	}
}

func TestTaskRetryAndTriggerValidation(t *testing.T) {
	for _, c := range []struct {
		name, doc, field string
	}{
		{"too many attempts", `"retry": {"attempts": 11}`, "retry.attempts"},
		{"negative attempts", `"retry": {"attempts": -1}`, "retry.attempts"},
		{"negative backoff", `"retry": {"backoff_ms": [1000, -1]}`, "retry.backoff_ms[1]"},
		{"backoff too long", `"retry": {"backoff_ms": [600001]}`, "retry.backoff_ms[0]"},
		{"unknown retry field", `"retry": {"tries": 2}`, "tries"},
		{"trigger too long", `"trigger": "` + strings.Repeat("x", 201) + `"`, "trigger"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeTask([]byte(`{"v": 1, "type": "task", "request_id": "r", "prompt": "p", ` + c.doc + `}`))
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("err %v, want one naming %s", err, c.field)
			}
		})
	}
	task, err := DecodeTask([]byte(`{"v": 1, "type": "task", "request_id": "r", "prompt": "p", "trigger": "cron", "retry": {"attempts": 2, "backoff_ms": [50]}}`))
	if err != nil || task.Trigger != "cron" || task.Retry == nil || task.Retry.Attempts != 2 || task.Retry.BackoffMS[0] != 50 {
		t.Fatalf("task %+v %v", task, err)
	}
}

func TestParseRetryEnv(t *testing.T) {
	if b, err := ParseRetryBackoffMS(" 500, 1500 "); err != nil || len(b) != 2 || b[1] != 1500 || FormatRetryBackoffMS(b) != "500,1500" {
		t.Fatalf("backoff %v %v", b, err)
	}
	for _, bad := range []string{"", "1s", "-5", "700000", strings.Repeat("1,", 11) + "1"} {
		if _, err := ParseRetryBackoffMS(bad); err == nil {
			t.Errorf("RETRY_BACKOFF_MS=%q accepted", bad)
		}
	}
	for _, bad := range []string{"0", "11", "x"} {
		if _, err := ParseRetryAttempts(bad); err == nil {
			t.Errorf("RETRY_ATTEMPTS=%q accepted", bad)
		}
	}
}

func TestRunHashDesignFields(t *testing.T) {
	r := NewRun("r", "t", "w", "p", time.Now())
	r.AgentSlug, r.Trigger = "claude", "manual"
	_ = r.Transition(RunQueued, time.Now())
	_ = r.Transition(RunRunning, time.Now())
	r.StepsTotal = 2
	_ = r.Step("execute-agent", time.Now())
	_ = r.Fail(CodeAgentTimeout, "execution exceeded 600s limit", time.Now())
	h := map[string]string{}
	for k, v := range r.Hash() {
		h[k] = v.(string)
	}
	back, err := RunFromHash(h)
	if err != nil || back.AgentSlug != "claude" || back.Trigger != "manual" || back.StepsTotal != 2 || back.StepsCompleted != 1 ||
		back.CurrentStep != "execute-agent" || back.Error != "AGENT_TIMEOUT: execution exceeded 600s limit" {
		t.Fatalf("run from its hash: %+v %v", back, err)
	}
	rep, err := DecodeProgressReport([]byte(`{"step": "s", "steps_total": 4}`))
	if err != nil || rep.StepsTotal != 4 {
		t.Fatalf("report %+v %v", rep, err)
	}
	if _, err := DecodeProgressReport([]byte(`{"step": "s", "steps_total": -1}`)); err == nil {
		t.Fatal("a negative steps_total accepted")
	}
}
