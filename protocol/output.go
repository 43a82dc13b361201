package protocol

import (
	"encoding/json"
	"time"
)

// Usage counts the tokens of a task (or, summed, of a session, project or
// worker).
type Usage struct {
	Input         int64 `json:"input"`
	Output        int64 `json:"output"`
	CacheRead     int64 `json:"cache_read"`
	CacheCreation int64 `json:"cache_creation"`
}

// Add returns u + o.
func (u Usage) Add(o Usage) Usage {
	return Usage{u.Input + o.Input, u.Output + o.Output, u.CacheRead + o.CacheRead, u.CacheCreation + o.CacheCreation}
}

// Context returns the tokens this usage puts in the model's context:
// input + cache_read + cache_creation. Apply it to the usage of ONE API
// call (the last one of a run), not to a run's summed usage.
func (u Usage) Context() int64 { return u.Input + u.CacheRead + u.CacheCreation }

// Total is every token of u, read and written.
func (u Usage) Total() int64 { return u.Input + u.Output + u.CacheRead + u.CacheCreation }

func (u Usage) validate(path string) error {
	switch {
	case u.Input < 0:
		return fieldErr(path+".input", "negative")
	case u.Output < 0:
		return fieldErr(path+".output", "negative")
	case u.CacheRead < 0:
		return fieldErr(path+".cache_read", "negative")
	case u.CacheCreation < 0:
		return fieldErr(path+".cache_creation", "negative")
	}
	return nil
}

// SessionAction says whether a task continued its project's session.
type SessionAction string

const (
	SessionNew    SessionAction = "new"
	SessionResume SessionAction = "resume"
)

// Reasons for a session decision.
const (
	SessionReasonNoSession    = "no_session"           // the project had none
	SessionReasonContinued    = "continued"            // every condition held
	SessionReasonForced       = "force_new_session"    // the task asked for a new one
	SessionReasonOverflow     = "context_overflow"     // context tokens reached the threshold
	SessionReasonStale        = "stale"                // last activity too long ago
	SessionReasonResumeFailed = "resume_failed"        // the resume failed; a new session ran the task
	SessionReasonReset        = "reset_context"        // a reset_context command cleared it
	SessionReasonHeld         = "held_by_other_worker" // another worker holds the project's session
	SessionReasonAnswers      = "answers"              // the task answers a run: its session, whatever the policy says
	SessionReasonRetry        = "retry"                // a retry continues the session of the attempt before
)

// SessionDecision records how the wrapper chose the session of a task.
type SessionDecision struct {
	Action SessionAction `json:"action"`
	Reason string        `json:"reason"`
	// PreviousSessionID is the session that was resumed or retired.
	PreviousSessionID string `json:"previous_session_id,omitempty"`
	// ResumeError is set when a resume was tried and failed (code
	// RESUME_FAILED); the task then ran in a new session.
	ResumeError *Error `json:"resume_error,omitempty"`
}

// Output is how a task ended: the one entry the wrapper (or, for a worker
// that crashed, the spawner) adds to the task's output stream.
type Output struct {
	V         int          `json:"v"`
	Type      Type         `json:"type"`
	RequestID string       `json:"request_id"`
	TaskID    string       `json:"task_id,omitempty"`
	ProjectID string       `json:"project_id,omitempty"`
	WorkerID  string       `json:"worker_id"`
	AgentType AgentType    `json:"agent_type,omitempty"`
	Status    OutputStatus `json:"status"`
	// Response is the agent's final text.
	Response string `json:"response,omitempty"`
	// Result is the "result" of the agent's stop output.
	Result json.RawMessage `json:"result,omitempty"`
	// Question is set when Status is blocked.
	Question      string           `json:"question,omitempty"`
	SessionID     string           `json:"session_id,omitempty"`
	Session       *SessionDecision `json:"session,omitempty"`
	Usage         Usage            `json:"usage"`
	ContextTokens int64            `json:"context_tokens"`
	CostUSD       float64          `json:"cost_usd"`
	// CostEstimated says CostUSD is the wrapper's estimate, the usage
	// priced by its model price table, for an agent that reports no cost
	// of its own (Droid).
	CostEstimated bool   `json:"cost_estimated,omitempty"`
	DurationMS    int64  `json:"duration_ms"`
	Error         *Error `json:"error,omitempty"`
	// Answers is the task's answers: the request whose session it continued.
	Answers string `json:"answers,omitempty"`
	// Attempt counts the task's attempts (1 for the first): its
	// deliveries, the spawner's hand-overs and the wrapper's retries.
	Attempt int `json:"attempt,omitempty"`
	// Git is what the task's git work came to (git.go): set for every
	// task that named a repository (or whose worker has a default) and
	// whose worktree was made.
	Git *GitOutput `json:"git,omitempty"`
	// Disk is set when the task left the worker's disk full: what the
	// agent wrote past its limits.disk failed with ENOSPC.
	Disk      *DiskFull      `json:"disk,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"` // the task's metadata, echoed
	Timestamp time.Time      `json:"timestamp"`
}

// Validate checks every field of o. A failed output must carry an error;
// a blocked one a question.
func (o Output) Validate() error {
	if err := checkID("request_id", o.RequestID, true); err != nil {
		return err
	}
	if err := checkID("worker_id", o.WorkerID, true); err != nil {
		return err
	}
	if err := checkID("answers", o.Answers, false); err != nil {
		return err
	}
	if o.AgentType != "" && !o.AgentType.Valid() {
		return fieldErr("agent_type", "unknown agent type %q", o.AgentType)
	}
	if !o.Status.Valid() {
		return fieldErr("status", "is %q, want complete, blocked, failed or cancelled", o.Status)
	}
	if (o.Status == StatusFailed || o.Status == StatusCancelled) && o.Error == nil {
		return fieldErr("error", "required when status is %s", o.Status)
	}
	if o.Status == StatusBlocked && o.Question == "" {
		return fieldErr("question", "required when status is blocked")
	}
	if err := checkResult(o.Result); err != nil {
		return err
	}
	if err := o.Usage.validate("usage"); err != nil {
		return err
	}
	switch {
	case o.ContextTokens < 0:
		return fieldErr("context_tokens", "negative")
	case o.CostUSD < 0:
		return fieldErr("cost_usd", "negative")
	case o.DurationMS < 0:
		return fieldErr("duration_ms", "negative")
	case o.Attempt < 0:
		return fieldErr("attempt", "negative")
	}
	if o.Session != nil {
		if o.Session.Action != SessionNew && o.Session.Action != SessionResume {
			return fieldErr("session.action", "is %q, want new or resume", o.Session.Action)
		}
		if o.Session.Reason == "" {
			return fieldErr("session.reason", "required")
		}
		if err := o.Session.ResumeError.validate("session.resume_error"); err != nil {
			return err
		}
	}
	if o.Timestamp.IsZero() {
		return fieldErr("timestamp", "required")
	}
	if err := o.Git.validate("git"); err != nil {
		return err
	}
	return o.Error.validate("error")
}

// Encode returns the JSON document of o, with v and type set.
func (o Output) Encode() ([]byte, error) {
	o.V, o.Type = Version, TypeOutput
	return encode(o)
}

// DecodeOutput parses and validates an output document.
func DecodeOutput(data []byte) (Output, error) {
	var o Output
	err := decode(TypeOutput, data, &o, func() error { return o.Validate() })
	return o, err
}

// DiskFull says that a worker's disk (limits.disk) is full.
type DiskFull struct {
	Code      string `json:"code"` // RefusedDiskFull
	Path      string `json:"path"` // the full directory
	SizeBytes int64  `json:"size_bytes"`
	FreeBytes int64  `json:"free_bytes"`
}
