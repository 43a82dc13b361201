package agent

import (
	"encoding/json"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// DroidParser parses `droid exec -o stream-json`.
//
// Droid reports usage only on its completion line, summed over the run; it
// gives no per-call usage, so a Droid run yields no Turn events and the
// runner falls back to the summed figures for the context size (an upper
// bound, which errs towards starting a new session early).
type DroidParser struct{}

var _ Parser = DroidParser{}

// ParseLine implements Parser.
func (DroidParser) ParseLine(line []byte) []Event {
	v, ok := jsonObject(line)
	if !ok {
		return nil
	}
	switch v.Get("type").String() {
	case "system":
		if v.Get("subtype").String() == "init" {
			in := &Init{SessionID: v.Get("session_id").String(), Model: v.Get("model").String()}
			v.Get("tools").ForEach(func(_, t gjson.Result) bool {
				in.Tools = append(in.Tools, t.String())
				return true
			})
			return []Event{{Init: in}}
		}
	case "tool_call":
		return []Event{{ToolCall: &ToolCall{Name: v.Get("toolName").String(), Input: json.RawMessage(v.Get("parameters").Raw)}}}
	case "completion":
		u := v.Get("usage")
		return []Event{{Result: &Result{
			Text: v.Get("finalText").String(),
			Usage: protocol.Usage{
				Input:         tokens(u.Get("input_tokens")),
				Output:        tokens(u.Get("output_tokens")),
				CacheRead:     tokens(u.Get("cache_read_input_tokens")),
				CacheCreation: tokens(u.Get("cache_creation_input_tokens")),
			},
			Turns:      int(v.Get("numTurns").Int()),
			SessionID:  v.Get("session_id").String(),
			DurationMS: v.Get("durationMs").Int(),
		}}}
	case "error":
		// Droid's error line: a failed run with no completion.
		msg := v.Get("message").String()
		if msg == "" {
			msg = v.Get("error").String()
		}
		return []Event{{Result: &Result{Text: msg, IsError: true, Subtype: "error",
			APIErrorStatus: leadingStatus(msg), SessionID: v.Get("session_id").String()}}}
	}
	return nil
}

// leadingStatus reads the HTTP status Droid puts first in an API error
// message ("401 {...}"); 0 when there is none.
func leadingStatus(msg string) int {
	if len(msg) < 4 || msg[3] != ' ' {
		return 0
	}
	n := 0
	for _, c := range msg[:3] {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	if n < 100 || n > 599 {
		return 0
	}
	return n
}
