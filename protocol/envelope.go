package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Version is the schema version every entry carries in its "v" field. A
// decoder refuses entries of another version rather than guess.
const Version = 1

// EntryField is the one field of every stream entry: its value is the JSON
// document of the event or command.
const EntryField = "data"

// Type is the "type" field of every document; it says which schema the
// document follows.
type Type string

const (
	TypeTask      Type = "task"
	TypeOutput    Type = "output"
	TypeProgress  Type = "progress"
	TypeLifecycle Type = "lifecycle"
	TypeHeartbeat Type = "heartbeat"
	TypeCommand   Type = "command"
	TypeReply     Type = "reply"
	TypeControl   Type = "control"
	TypeCancel    Type = "cancel"  // on an input stream, beside tasks
	TypeMessage   Type = "message" // on an input stream: steers a running task
	// TypePermissionRequest (output stream) and TypePermissionReply (input
	// stream): a tool call outside ALLOWED_COMMANDS, asked and answered.
	TypePermissionRequest Type = "permission_request"
	TypePermissionReply   Type = "permission_reply"
)

// DecodeError says why a document was refused and which field is wrong.
type DecodeError struct {
	Type   Type   // what was being decoded
	Field  string // dotted path of the wrong field; empty when the whole document is wrong
	Reason string
}

func (e *DecodeError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("protocol: decode %s: %s", e.Type, e.Reason)
	}
	return fmt.Sprintf("protocol: decode %s: field %s: %s", e.Type, e.Field, e.Reason)
}

// fieldError is returned by validate methods; decode wraps it into a
// DecodeError with the document type.
type fieldError struct {
	field  string
	reason string
}

func (e *fieldError) Error() string { return "field " + e.field + ": " + e.reason }

func fieldErr(field, format string, args ...any) error {
	return &fieldError{field: field, reason: fmt.Sprintf(format, args...)}
}

// header is the part every document shares.
type header struct {
	V    int  `json:"v"`
	Type Type `json:"type"`
}

// decode parses data into dst strictly: one JSON object, no unknown fields,
// no trailing data, the right version and type; then it runs validate.
func decode(t Type, data []byte, dst any, validate func() error) error {
	var h header
	if err := json.Unmarshal(data, &h); err != nil {
		return &DecodeError{Type: t, Reason: describeJSONError(err)}
	}
	if h.V == 0 {
		return &DecodeError{Type: t, Field: "v", Reason: fmt.Sprintf("required (the schema version, %d)", Version)}
	}
	if h.V != Version {
		return &DecodeError{Type: t, Field: "v", Reason: fmt.Sprintf("unsupported schema version %d (this decoder reads %d)", h.V, Version)}
	}
	if h.Type != t {
		return &DecodeError{Type: t, Field: "type", Reason: fmt.Sprintf("is %q, want %q", h.Type, t)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		field := jsonErrorField(err)
		if field == "" {
			field = locateBadField(data, dst)
		}
		return &DecodeError{Type: t, Field: field, Reason: describeJSONError(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &DecodeError{Type: t, Reason: "trailing data after the JSON object"}
	}
	if err := validate(); err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			return &DecodeError{Type: t, Field: fe.field, Reason: fe.reason}
		}
		return &DecodeError{Type: t, Reason: err.Error()}
	}
	return nil
}

func jsonErrorField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return strings.Trim(f, `"`)
	}
	return ""
}

// locateBadField finds the top-level field whose value does not decode,
// for errors that encoding/json reports without a field (a malformed
// timestamp, say).
func locateBadField(data []byte, dst any) string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(data, &raw) != nil {
		return ""
	}
	rt := reflect.TypeOf(dst).Elem()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		v, ok := raw[name]
		if !ok || name == "" {
			continue
		}
		if json.Unmarshal(v, reflect.New(f.Type).Interface()) != nil {
			return name
		}
	}
	return ""
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("is a JSON %s, want %s", te.Value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not valid JSON at byte %d: %s", se.Offset, se.Error())
	}
	// encoding/json reports an unknown field (DisallowUnknownFields) with
	// no error type of its own: its fixed wording is all there is to tell.
	if strings.HasPrefix(err.Error(), "json: unknown field ") {
		return "unknown field"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "empty or truncated document"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// encode marshals a document; every document type sets its own v and type
// before calling it.
func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("protocol: encode: %w", err)
	}
	return b, nil
}

// Values returns the field map of a stream entry that carries doc, ready for
// XADD.
func Values(doc []byte) map[string]any {
	return map[string]any{EntryField: string(doc)}
}

// EntryData returns the JSON document of a stream entry as read by XREAD,
// or an error when the entry has no data field or it is not a string.
func EntryData(values map[string]any) ([]byte, error) {
	raw, ok := values[EntryField]
	if !ok {
		return nil, fmt.Errorf("protocol: stream entry has no %q field", EntryField)
	}
	switch v := raw.(type) {
	case string:
		return []byte(v), nil
	case []byte:
		return v, nil
	}
	return nil, fmt.Errorf("protocol: stream entry field %q is a %T, want a string", EntryField, raw)
}

// PeekType returns the version and type of a document without decoding the
// rest, for consumers that read streams carrying several types (an output
// stream carries progress and output events).
func PeekType(doc []byte) (int, Type, error) {
	var h header
	if err := json.Unmarshal(doc, &h); err != nil {
		return 0, "", fmt.Errorf("protocol: peek type: %s", describeJSONError(err))
	}
	return h.V, h.Type, nil
}

// decodeBare parses a JSON object strictly (unknown fields and trailing
// data refused) without the v/type header, for local requests that never
// cross Redis.
func decodeBare(what string, data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return &DecodeError{Type: Type(what), Field: jsonErrorField(err), Reason: describeJSONError(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &DecodeError{Type: Type(what), Reason: "trailing data after the JSON object"}
	}
	return nil
}

func wrapField(what string, err error) error {
	if err == nil {
		return nil
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return &DecodeError{Type: Type(what), Field: fe.field, Reason: fe.reason}
	}
	return &DecodeError{Type: Type(what), Reason: err.Error()}
}
