package protocol

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// PermissionRequest asks the task's owner whether the agent may make a
// tool call that ALLOWED_COMMANDS does not allow (a worker with
// AGENT_APPROVAL): published on the task's output stream. The owner
// answers with a PermissionReply on the worker's input; no answer within
// TimeoutMS denies it.
type PermissionRequest struct {
	V            int             `json:"v"`
	Type         Type            `json:"type"`
	WorkerID     string          `json:"worker_id"`
	RequestID    string          `json:"request_id"`
	TaskID       string          `json:"task_id,omitempty"`
	PermissionID string          `json:"permission_id"` // echoed by the reply
	Tool         string          `json:"tool"`          // Bash, WebFetch, ...
	Input        json.RawMessage `json:"input"`         // the tool call's input, as the agent gave it
	TimeoutMS    int64           `json:"timeout_ms"`    // denied after this long without a reply
	Timestamp    time.Time       `json:"timestamp"`
}

// Validate checks every field of p.
func (p PermissionRequest) Validate() error {
	for _, f := range []struct{ name, v string }{{"worker_id", p.WorkerID}, {"request_id", p.RequestID}, {"permission_id", p.PermissionID}} {
		if err := checkID(f.name, f.v, true); err != nil {
			return err
		}
	}
	if err := checkID("task_id", p.TaskID, false); err != nil {
		return err
	}
	if p.Tool == "" {
		return fieldErr("tool", "required")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(p.Input, &obj) != nil || obj == nil {
		return fieldErr("input", "must be a JSON object")
	}
	if p.TimeoutMS < 0 {
		return fieldErr("timeout_ms", "negative")
	}
	if p.Timestamp.IsZero() {
		return fieldErr("timestamp", "required")
	}
	return nil
}

// Encode returns the JSON document of p, with v and type set.
func (p PermissionRequest) Encode() ([]byte, error) {
	p.V, p.Type = Version, TypePermissionRequest
	return encode(p)
}

// DecodePermissionRequest parses and validates a permission request.
func DecodePermissionRequest(data []byte) (PermissionRequest, error) {
	var p PermissionRequest
	err := decode(TypePermissionRequest, data, &p, func() error { return p.Validate() })
	return p, err
}

// PermissionReply answers a PermissionRequest: added to the worker's input
// stream.
type PermissionReply struct {
	V            int    `json:"v"`
	Type         Type   `json:"type"`
	RequestID    string `json:"request_id"`    // the task
	PermissionID string `json:"permission_id"` // the request answered
	Allow        bool   `json:"allow"`
	// Message tells the agent why it was denied.
	Message string `json:"message,omitempty"`
}

// NewPermissionReply returns a reply with v and type set.
func NewPermissionReply(requestID, permissionID string, allow bool, message string) PermissionReply {
	return PermissionReply{V: Version, Type: TypePermissionReply, RequestID: requestID, PermissionID: permissionID, Allow: allow, Message: message}
}

// Validate checks every field of r.
func (r PermissionReply) Validate() error {
	if err := checkID("request_id", r.RequestID, true); err != nil {
		return err
	}
	if err := checkID("permission_id", r.PermissionID, true); err != nil {
		return err
	}
	if len(r.Message) > MaxCancelReasonBytes || !utf8.ValidString(r.Message) {
		return fieldErr("message", "at most %d bytes of UTF-8", MaxCancelReasonBytes)
	}
	return nil
}

// Encode returns the JSON document of r, with v and type set.
func (r PermissionReply) Encode() ([]byte, error) {
	r.V, r.Type = Version, TypePermissionReply
	return encode(r)
}

// DecodePermissionReply parses and validates a permission reply.
func DecodePermissionReply(data []byte) (PermissionReply, error) {
	var r PermissionReply
	err := decode(TypePermissionReply, data, &r, func() error { return r.Validate() })
	return r, err
}
