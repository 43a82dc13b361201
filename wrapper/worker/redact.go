package worker

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// Redaction of everything that leaves the container. The Redactor
// replaces secrets in text, and in the structured fields of an output: the
// stop output's result (every string, keys included, at any depth), the
// question, and the echoed metadata.

// Redactor replaces secret values with [REDACTED] in text that leaves the
// wrapper (error messages, stderr tails, logs).
type Redactor struct{ secrets []string }

// NewRedactor collects the values of variables whose names say they are
// secret (KEY, TOKEN, SECRET, PASSWORD), and the Redis password.
func NewRedactor(environ []string, redisURL string) *Redactor {
	r := &Redactor{}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		up := strings.ToUpper(name)
		if len(value) >= 6 && (strings.Contains(up, "KEY") || strings.Contains(up, "TOKEN") ||
			strings.Contains(up, "SECRET") || strings.Contains(up, "PASSWORD")) {
			r.secrets = append(r.secrets, value)
		}
	}
	// The Redis passwords (the server's, and a sentinel URL's
	// sentinel_password), as they are and as the URL spells them.
	if _, rest, ok := strings.Cut(redisURL, "://"); ok {
		if userinfo, _, ok := strings.Cut(rest, "@"); ok {
			if _, pw, ok := strings.Cut(userinfo, ":"); ok && len(pw) >= 4 {
				r.secrets = append(r.secrets, pw)
			}
		}
	}
	if u, err := protocol.ParseRedisURL(redisURL); err == nil {
		for _, pw := range []string{u.Password, u.SentinelPassword} {
			if len(pw) >= 4 {
				r.secrets = append(r.secrets, pw, url.QueryEscape(pw))
			}
		}
	}
	return r
}

// Redact returns s with every secret replaced.
func (r *Redactor) Redact(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "[REDACTED]")
	}
	return s
}

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
