package protocol

import (
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on outside input. They bound what one entry may make a consumer
// hold in memory.
const (
	MaxIDLen          = 200
	MaxPromptBytes    = 1 << 20 // 1 MiB
	MaxTimeoutSeconds = 24 * 60 * 60
	// MaxInstructionsBytes bounds a worker spec's instructions. They reach
	// the wrapper in its INSTRUCTIONS variable, and Linux refuses to
	// start a process with one environment string over 128 KiB
	// (MAX_ARG_STRLEN); 64 KiB keeps well below that, and below what a
	// model should read as standing instructions on every turn.
	MaxInstructionsBytes = 64 << 10
)

// Task is one request to a worker: the entry a producer adds to a worker's
// input stream.
type Task struct {
	V         int    `json:"v"`
	Type      Type   `json:"type"`
	RequestID string `json:"request_id"`           // required; identifies the run, unique per request
	TaskID    string `json:"task_id,omitempty"`    // the producer's own task id, echoed back
	ProjectID string `json:"project_id,omitempty"` // sessions belong to a project; empty means "default"
	Prompt    string `json:"prompt"`               // required
	// ForceNewSession starts a new agent session even when the project's
	// session could be continued.
	ForceNewSession bool `json:"force_new_session,omitempty"`
	// TimeoutSeconds overrides the worker's task timeout; 0 keeps it.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// Answers names the request this task answers (a blocked task's
	// question): the task continues that run's session and project,
	// whatever the session policy would choose.
	Answers string `json:"answers,omitempty"`
	// MaxBudgetUSD bounds what the task may spend on model calls (Claude's
	// --max-budget-usd); 0: no bound but the project's budget.
	MaxBudgetUSD float64 `json:"max_budget_usd,omitempty"`
	// Retry asks for the task to be run again after a retryable failure
	// (retry.go); nil: it is never retried.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Trigger says what started the task ("manual", "cron", "webhook"):
	// free text for the producer, kept on the run hash.
	Trigger string `json:"trigger,omitempty"`
	// Priority orders the shared developer queue (priority.go): high,
	// normal or low; "" is normal. A long-lived worker's own input is
	// read in order, whatever the priority.
	Priority Priority `json:"priority,omitempty"`
	// Git names the repository the task works in (git.go): the agent
	// runs in a worktree of it on the task's branch, and the output
	// carries what was committed and pushed. Nil: the worker's default
	// (its spec's git), if any.
	Git      *Git           `json:"git,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"` // echoed back on the Output
}

// MaxTriggerBytes bounds a task's trigger.
const MaxTriggerBytes = 200

// DefaultProject is the project of a task that names none.
const DefaultProject = "default"

// NewTask returns a task with v and type set.
func NewTask(requestID, prompt string) Task {
	return Task{V: Version, Type: TypeTask, RequestID: requestID, Prompt: prompt}
}

// Project returns the task's project, or DefaultProject.
func (t Task) Project() string {
	if t.ProjectID == "" {
		return DefaultProject
	}
	return t.ProjectID
}

// Timeout returns the task's own timeout, or def when it sets none.
func (t Task) Timeout(def time.Duration) time.Duration {
	if t.TimeoutSeconds > 0 {
		return time.Duration(t.TimeoutSeconds) * time.Second
	}
	return def
}

// Validate checks every field of t.
func (t Task) Validate() error {
	if err := checkID("request_id", t.RequestID, true); err != nil {
		return err
	}
	if err := checkID("task_id", t.TaskID, false); err != nil {
		return err
	}
	if err := checkID("project_id", t.ProjectID, false); err != nil {
		return err
	}
	if err := checkID("answers", t.Answers, false); err != nil {
		return err
	}
	if t.Answers != "" && t.Answers == t.RequestID {
		return fieldErr("answers", "names the task itself")
	}
	if t.Prompt == "" {
		return fieldErr("prompt", "required")
	}
	if len(t.Prompt) > MaxPromptBytes {
		return fieldErr("prompt", "is %d bytes, at most %d", len(t.Prompt), MaxPromptBytes)
	}
	if !utf8.ValidString(t.Prompt) {
		return fieldErr("prompt", "is not valid UTF-8")
	}
	if err := checkBudget("max_budget_usd", t.MaxBudgetUSD); err != nil {
		return err
	}
	if !t.Priority.Valid() {
		return fieldErr("priority", "is %q, want high, normal or low", t.Priority)
	}
	if len(t.Trigger) > MaxTriggerBytes || !utf8.ValidString(t.Trigger) {
		return fieldErr("trigger", "want at most %d bytes of UTF-8", MaxTriggerBytes)
	}
	if t.Retry != nil {
		if err := t.Retry.Validate("retry"); err != nil {
			return err
		}
	}
	if t.TimeoutSeconds < 0 || t.TimeoutSeconds > MaxTimeoutSeconds {
		return fieldErr("timeout_seconds", "is %d, want 0 to %d", t.TimeoutSeconds, MaxTimeoutSeconds)
	}
	return t.Git.validate("git")
}

// RetryPolicy is the task's retry policy with def filling what it leaves
// out, and whether it asked for retries at all.
func (t Task) RetryPolicy(def RetryPolicy) (RetryPolicy, bool) {
	if t.Retry == nil {
		return RetryPolicy{}, false
	}
	return t.Retry.Resolve(def), true
}

// Encode returns the JSON document of t, with v and type set.
func (t Task) Encode() ([]byte, error) {
	t.V, t.Type = Version, TypeTask
	return encode(t)
}

// DecodeTask parses and validates a task document. Its errors are
// *DecodeError values that name the wrong field.
func DecodeTask(data []byte) (Task, error) {
	var t Task
	err := decode(TypeTask, data, &t, func() error { return t.Validate() })
	return t, err
}

// checkID validates an identifier that may end up in a Redis key: at most
// MaxIDLen bytes of printable UTF-8 with no white space.
func checkID(field, v string, required bool) error {
	if v == "" {
		if required {
			return fieldErr(field, "required")
		}
		return nil
	}
	if len(v) > MaxIDLen {
		return fieldErr(field, "is %d bytes, at most %d", len(v), MaxIDLen)
	}
	if !utf8.ValidString(v) {
		return fieldErr(field, "is not valid UTF-8")
	}
	for _, r := range v {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fieldErr(field, "must not contain white space or control characters")
		}
	}
	return nil
}
