package stubmodel

import (
	"encoding/json"
	"strings"
)

// ToolResultPlaceholder in a step's Text is replaced by the text of the
// last tool result the request carries (its last user turn), escaped for
// a JSON string: a script can have the model quote what a tool returned
// inside its stop output ({"result": {"echo": "{{tool_result}}"}}), as a
// real model would, so that a test sees the result reach the task's
// output. With no tool result it becomes "".
const ToolResultPlaceholder = "{{tool_result}}"

// lastToolResult returns the text of the last tool_result block of the
// last message (a string content, or its text blocks joined by "\n").
func lastToolResult(messages []json.RawMessage) string {
	if len(messages) == 0 {
		return ""
	}
	var msg struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(messages[len(messages)-1], &msg) != nil {
		return ""
	}
	var blocks []struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(msg.Content, &blocks) != nil {
		return ""
	}
	text := ""
	for _, b := range blocks {
		if b.Type != "tool_result" {
			continue
		}
		var s string
		if json.Unmarshal(b.Content, &s) == nil {
			text = s
			continue
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(b.Content, &parts) == nil {
			var texts []string
			for _, p := range parts {
				if p.Type == "text" {
					texts = append(texts, p.Text)
				}
			}
			text = strings.Join(texts, "\n")
		}
	}
	return text
}

// withToolResult returns step with ToolResultPlaceholder in its text
// replaced by result.
func withToolResult(step Step, result string) Step {
	if !strings.Contains(step.Text, ToolResultPlaceholder) {
		return step
	}
	quoted, _ := json.Marshal(result)
	step.Text = strings.ReplaceAll(step.Text, ToolResultPlaceholder, string(quoted[1:len(quoted)-1]))
	return step
}
