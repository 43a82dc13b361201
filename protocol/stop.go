package protocol

import (
	"bytes"
	"embed"
	"encoding/json"
	"strings"
)

//go:embed schema/*.schema.json
var schemaFS embed.FS

// Schema returns the JSON Schema file named name (for example
// "output.schema.json"), as shipped under schema/.
func Schema(name string) ([]byte, error) { return schemaFS.ReadFile("schema/" + name) }

// SchemaNames lists the JSON Schema files shipped under schema/.
func SchemaNames() []string {
	entries, _ := schemaFS.ReadDir("schema")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// StopOutputSchema is the JSON Schema of the stop output, in the form the
// wrapper hands to `claude --json-schema`.
func StopOutputSchema() string {
	b, err := Schema("stop_output.schema.json")
	if err != nil {
		panic("protocol: stop output schema missing from the embedded files: " + err.Error())
	}
	return string(b)
}

// StopOutput is what an agent ends with ("JSON stdout = I stopped"): it has
// lost its autonomy, for whatever reason, and the consumer decides what
// comes next.
type StopOutput struct {
	Status   OutputStatus    `json:"status"`
	Result   json.RawMessage `json:"result,omitempty"`
	Question string          `json:"question,omitempty"`
}

// Validate checks s against the stop output schema.
func (s StopOutput) Validate() error {
	if !s.Status.ValidStop() {
		return fieldErr("status", "is %q, want complete, blocked or failed", s.Status)
	}
	if s.Status == StatusBlocked && s.Question == "" {
		return fieldErr("question", "required when status is blocked")
	}
	return checkResult(s.Result)
}

// checkResult accepts an absent result, null, or a JSON object.
func checkResult(raw json.RawMessage) error {
	r := bytes.TrimSpace(raw)
	if len(r) == 0 || bytes.Equal(r, []byte("null")) {
		return nil
	}
	if r[0] != '{' || !json.Valid(r) {
		return fieldErr("result", "must be a JSON object or null")
	}
	return nil
}

// DecodeStopOutput parses a stop output strictly.
func DecodeStopOutput(data []byte) (StopOutput, error) {
	var s StopOutput
	if err := decodeBare("stop output", data, &s); err != nil {
		return s, err
	}
	if err := s.Validate(); err != nil {
		return s, wrapField("stop output", err)
	}
	if bytes.Equal(bytes.TrimSpace(s.Result), []byte("null")) {
		s.Result = nil
	}
	return s, nil
}

// Bounds of FindStopOutput's search, so that a huge final text cannot make
// it slow: only the tail is searched, and only so many candidates.
const (
	stopSearchTail       = 1 << 20
	stopSearchCandidates = 2000
)

// FindStopOutput returns the last stop output in an agent's final text:
// of the JSON objects in the text that are valid stop outputs, the one that
// ends last (an enclosing object wins over one nested in it). Fenced code
// blocks need no special care. ok is false when the text has none.
func FindStopOutput(text string) (out StopOutput, ok bool) {
	base := 0
	if len(text) > stopSearchTail {
		base = len(text) - stopSearchTail
	}
	tail := text[base:]
	bestStart, bestEnd := -1, -1
	tries := 0
	for i := strings.LastIndexByte(tail, '{'); i >= 0 && tries < stopSearchCandidates; i = strings.LastIndexByte(tail[:i], '{') {
		tries++
		dec := json.NewDecoder(strings.NewReader(tail[i:]))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			continue
		}
		end := i + int(dec.InputOffset())
		if end < bestEnd {
			continue
		}
		s, err := DecodeStopOutput(raw)
		if err != nil {
			continue
		}
		if end > bestEnd || i < bestStart {
			out, bestStart, bestEnd, ok = s, i, end, true
		}
	}
	return out, ok
}
