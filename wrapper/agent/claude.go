package agent

import (
	"encoding/json"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// ClaudeParser parses `claude -p --output-format stream-json --verbose`.
type ClaudeParser struct{}

var _ Parser = ClaudeParser{}

func claudeUsage(u gjson.Result) protocol.Usage {
	return protocol.Usage{
		Input:         tokens(u.Get("input_tokens")),
		Output:        tokens(u.Get("output_tokens")),
		CacheRead:     tokens(u.Get("cache_read_input_tokens")),
		CacheCreation: tokens(u.Get("cache_creation_input_tokens")),
	}
}

// maxTokens bounds a token count an agent reports: far above any real
// count, low enough that the sums the wrapper makes of many cannot
// overflow.
const maxTokens = 1 << 40

// tokens reads a token count an agent printed. The agent's output is not
// trusted: a negative count is 0, a huge one maxTokens, so that no output
// fails to validate for the agent's arithmetic.
func tokens(v gjson.Result) int64 {
	n := v.Int()
	if v.Type == gjson.Number && v.Num > maxTokens {
		n = maxTokens
	}
	return min(max(n, 0), maxTokens)
}

// jsonObject parses a line that is one JSON object; ok is false for
// anything else (not JSON, an array, a bare value).
func jsonObject(line []byte) (gjson.Result, bool) {
	if !gjson.ValidBytes(line) {
		return gjson.Result{}, false
	}
	v := gjson.ParseBytes(line)
	return v, v.IsObject()
}

// ParseLine implements Parser.
func (ClaudeParser) ParseLine(line []byte) []Event {
	v, ok := jsonObject(line)
	if !ok {
		return nil
	}
	switch v.Get("type").String() {
	case "control_response":
		r := v.Get("response")
		return []Event{{Control: &ControlResponse{RequestID: r.Get("request_id").String(), Subtype: r.Get("subtype").String(),
			Error: r.Get("error").String()}}}
	case "system":
		switch v.Get("subtype").String() {
		case "init":
			in := &Init{SessionID: v.Get("session_id").String(), Model: v.Get("model").String()}
			v.Get("mcp_servers").ForEach(func(_, m gjson.Result) bool {
				in.MCPServers = append(in.MCPServers, MCPServerStatus{Name: m.Get("name").String(), Status: m.Get("status").String()})
				return true
			})
			return []Event{{Init: in}}
		case "api_retry":
			return []Event{{Retry: &APIRetry{
				Attempt:    int(v.Get("attempt").Int()),
				MaxRetries: int(v.Get("max_retries").Int()),
				DelayMS:    v.Get("retry_delay_ms").Float(),
				Status:     int(v.Get("error_status").Int()),
				Error:      v.Get("error").String(),
			}}}
		}
	case "control_request":
		if r := v.Get("request"); r.Get("subtype").String() == "can_use_tool" {
			return []Event{{Permission: &PermissionAsk{ID: v.Get("request_id").String(), Tool: r.Get("tool_name").String(),
				Input: json.RawMessage(r.Get("input").Raw)}}}
		}
	case "user":
		if v.Get("isReplay").Bool() {
			return []Event{{Replay: true}}
		}
	case "assistant":
		msg := v.Get("message")
		var evs []Event
		// A "<synthetic>" message is Claude Code's own (an error shown as a
		// reply): it made no API call, and its zero usage is no context.
		if u := msg.Get("usage"); u.Exists() && msg.Get("model").String() != "<synthetic>" {
			evs = append(evs, Event{Turn: &Turn{MessageID: msg.Get("id").String(), Usage: claudeUsage(u)}})
		}
		if kind := v.Get("error").String(); kind != "" {
			evs = append(evs, Event{APIError: &APIError{Kind: kind}})
		}
		msg.Get("content").ForEach(func(_, c gjson.Result) bool {
			if c.Get("type").String() == "tool_use" {
				evs = append(evs, Event{ToolCall: &ToolCall{Name: c.Get("name").String(), Input: json.RawMessage(c.Get("input").Raw)}})
			}
			return true
		})
		return evs
	case "result":
		r := &Result{
			Text:           v.Get("result").String(),
			IsError:        v.Get("is_error").Bool(),
			Subtype:        v.Get("subtype").String(),
			APIErrorStatus: int(v.Get("api_error_status").Int()),
			Usage:          claudeUsage(v.Get("usage")),
			CostUSD:        v.Get("total_cost_usd").Float(),
			Turns:          int(v.Get("num_turns").Int()),
			SessionID:      v.Get("session_id").String(),
			DurationMS:     v.Get("duration_ms").Int(),
		}
		if so := v.Get("structured_output"); so.Exists() && so.Type != gjson.Null {
			r.StructuredOutput = json.RawMessage(so.Raw)
		}
		v.Get("modelUsage").ForEach(func(_, m gjson.Result) bool {
			if w := m.Get("contextWindow").Int(); w > r.ContextWindow {
				r.ContextWindow = w
			}
			return true
		})
		evs := []Event{{Result: r}}
		v.Get("permission_denials").ForEach(func(_, d gjson.Result) bool {
			evs = append(evs, Event{Denied: &Denial{Tool: d.Get("tool_name").String(), Input: json.RawMessage(d.Get("tool_input").Raw)}})
			return true
		})
		return evs
	}
	return nil
}
