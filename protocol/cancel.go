package protocol

import (
	"time"
	"unicode/utf8"
)

// MaxCancelReasonBytes bounds a cancel's reason.
const MaxCancelReasonBytes = 1024

// Cancel asks that a task end now, whether it waits on the input or runs:
// the entry a producer adds to the same input stream as the task
// (worker:{id}:input, or worker:developer:input, where every developer
// worker sees it). The task then gets exactly one Output, with status
// cancelled, unless it had already ended.
type Cancel struct {
	V         int    `json:"v"`
	Type      Type   `json:"type"`
	RequestID string `json:"request_id"`       // required: the task to cancel
	Reason    string `json:"reason,omitempty"` // echoed in the output's error message
	// Timestamp is when the producer asked; informative.
	Timestamp *time.Time `json:"timestamp,omitempty"`
}

// NewCancel returns a cancel of requestID with v and type set.
func NewCancel(requestID, reason string) Cancel {
	return Cancel{V: Version, Type: TypeCancel, RequestID: requestID, Reason: reason}
}

// Validate checks every field of c.
func (c Cancel) Validate() error {
	if err := checkID("request_id", c.RequestID, true); err != nil {
		return err
	}
	if len(c.Reason) > MaxCancelReasonBytes {
		return fieldErr("reason", "is %d bytes, at most %d", len(c.Reason), MaxCancelReasonBytes)
	}
	if !utf8.ValidString(c.Reason) {
		return fieldErr("reason", "is not valid UTF-8")
	}
	return nil
}

// Encode returns the JSON document of c, with v and type set.
func (c Cancel) Encode() ([]byte, error) {
	c.V, c.Type = Version, TypeCancel
	return encode(c)
}

// DecodeCancel parses and validates a cancel document.
func DecodeCancel(data []byte) (Cancel, error) {
	var c Cancel
	err := decode(TypeCancel, data, &c, func() error { return c.Validate() })
	return c, err
}
