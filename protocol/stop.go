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

// MaxStopSearch is how much of a final text FindStopOutput searches: a
// stop output anywhere in a text up to it is found, whatever its own size;
// of a longer text, the last MaxStopSearch bytes (a text with none there
// is failed OUTPUT_TOO_LARGE, not NO_STOP_OUTPUT).
const MaxStopSearch = 16 << 20

// stopSearchWork bounds the bytes FindStopOutput's candidates may span in
// all, so that a text built to make it slow (objects nested in each other,
// each scanned from its own start) costs a bounded time.
const stopSearchWork = 64 << 20

// FindStopOutput returns the last stop output in an agent's final text:
// of the JSON objects in the text that are valid stop outputs, the one that
// ends last (an enclosing object wins over one nested in it). Fenced code
// blocks need no special care. ok is false when the text (its last
// MaxStopSearch bytes) has none.
//
// Each '{' that may open an object is a candidate, from the last: its end
// is found by matching braces (outside strings), and only an object that
// could still win, names "status" and is valid JSON is decoded.
func FindStopOutput(text string) (out StopOutput, ok bool) {
	if len(text) > MaxStopSearch {
		text = text[len(text)-MaxStopSearch:]
	}
	bestStart, bestEnd := -1, -1
	work := 0
	for i := strings.LastIndexByte(text, '{'); i >= 0 && work < stopSearchWork; i = strings.LastIndexByte(text[:i], '{') {
		if !mayOpenObject(text[i+1:]) {
			continue
		}
		end, scanned := objectEnd(text, i)
		work += scanned
		if end < 0 || end < bestEnd {
			continue
		}
		obj := text[i:end]
		if !strings.Contains(obj, `"status"`) || !json.Valid([]byte(obj)) {
			continue
		}
		s, err := DecodeStopOutput([]byte(obj))
		if err != nil {
			continue
		}
		if end > bestEnd || i < bestStart {
			out, bestStart, bestEnd, ok = s, i, end, true
		}
	}
	return out, ok
}

// objectEnd returns where the object opened at text[i] ends (past its
// closing brace), matching braces and brackets outside strings, or -1
// when the text ends first; and how many bytes it read.
func objectEnd(text string, i int) (end, scanned int) {
	depth, inString, escaped := 0, false, false
	for j := i; j < len(text); j++ {
		c := text[j]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return j + 1, j + 1 - i
			}
		}
	}
	return -1, len(text) - i
}

// mayOpenObject reports whether what follows a '{' can go on a JSON
// object: a key or its end, after white space. Prose and code braces fail
// here, without a decoder.
func mayOpenObject(rest string) bool {
	for j := 0; j < len(rest); j++ {
		switch rest[j] {
		case ' ', '\t', '\n', '\r':
			continue
		case '"', '}':
			return true
		}
		return false
	}
	return false
}
