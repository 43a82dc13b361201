package worker

import (
	"bytes"
	"encoding/json"
)

// Redaction of everything that leaves the container. The Redactor itself
// (agentcmd.go) replaces secrets in text; these apply it to the structured
// fields of an output: the stop output's result (every string, keys
// included, at any depth), the question, and the echoed metadata.

// RedactJSON returns doc with every secret replaced in its strings and
// keys. A document that is not valid JSON comes back as a JSON string of
// its redacted text, so that no secret passes because it failed to parse.
func (r *Redactor) RedactJSON(doc json.RawMessage) json.RawMessage {
	if len(doc) == 0 || len(r.secrets) == 0 {
		return doc
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		b, _ := json.Marshal(r.Redact(string(doc)))
		return b
	}
	b, err := json.Marshal(r.redactValue(v))
	if err != nil {
		b, _ = json.Marshal(r.Redact(string(doc)))
	}
	return b
}

// RedactMap returns a copy of m with every secret replaced.
func (r *Redactor) RedactMap(m map[string]any) map[string]any {
	if m == nil || len(r.secrets) == 0 {
		return m
	}
	out, _ := r.redactValue(m).(map[string]any)
	return out
}

func (r *Redactor) redactValue(v any) any {
	switch x := v.(type) {
	case string:
		return r.Redact(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.Redact(k)] = r.redactValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.redactValue(e)
		}
		return out
	default:
		return v
	}
}
