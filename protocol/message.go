package protocol

import "unicode/utf8"

// MaxMessageBytes bounds a steering message's text.
const MaxMessageBytes = 64 << 10

// Message steers a running task: text from the producer that reaches the
// agent while it works, as a user message of the task's session. Added to
// the same input stream as the task.
type Message struct {
	V         int    `json:"v"`
	Type      Type   `json:"type"`
	RequestID string `json:"request_id"` // required: the running task it is for
	Text      string `json:"text"`       // required: 1 B to 64 KiB
}

// NewMessage returns a message for requestID with v and type set.
func NewMessage(requestID, text string) Message {
	return Message{V: Version, Type: TypeMessage, RequestID: requestID, Text: text}
}

// Validate checks every field of m.
func (m Message) Validate() error {
	if err := checkID("request_id", m.RequestID, true); err != nil {
		return err
	}
	switch {
	case m.Text == "":
		return fieldErr("text", "required")
	case len(m.Text) > MaxMessageBytes:
		return fieldErr("text", "is %d bytes, at most %d", len(m.Text), MaxMessageBytes)
	case !utf8.ValidString(m.Text):
		return fieldErr("text", "is not valid UTF-8")
	}
	return nil
}

// Encode returns the JSON document of m, with v and type set.
func (m Message) Encode() ([]byte, error) {
	m.V, m.Type = Version, TypeMessage
	return encode(m)
}

// DecodeMessage parses and validates a message document.
func DecodeMessage(data []byte) (Message, error) {
	var m Message
	err := decode(TypeMessage, data, &m, func() error { return m.Validate() })
	return m, err
}
