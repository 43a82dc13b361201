package stubmodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The OpenAI Responses API (POST /v1/responses), which OpenAI's Codex CLI
// speaks, driven by the same Script and Step types as the Messages API:
// a text step is an assistant message, a tool call step a function_call
// item (its Input as the arguments JSON), an error step an error answer
// in OpenAI's shape. Usage maps as OpenAI counts it: input_tokens is the
// whole prompt (InputTokens + CacheReadInputTokens +
// CacheCreationInputTokens), of which input_tokens_details.cached_tokens
// (CacheReadInputTokens) were read from the cache.
//
// Codex 0.171 offers its classic function tools (exec_command,
// apply_patch, ...) in "tools" to a model it has no metadata for, such as
// gpt-stub; its own models (its default one) get code mode instead, one
// JavaScript "exec" tool in an additional_tools input item, which no step
// drives. Run Codex against the stub with such a model name (-m).

// responsesRequest is the part of a Responses request the stub reads.
type responsesRequest struct {
	Model        string            `json:"model"`
	Stream       bool              `json:"stream"`
	Instructions string            `json:"instructions"`
	Input        json.RawMessage   `json:"input"`
	Tools        []json.RawMessage `json:"tools"`
}

// items returns the input as a list of items (a plain string input is one
// user message).
func (q responsesRequest) items() []json.RawMessage {
	var items []json.RawMessage
	if json.Unmarshal(q.Input, &items) == nil {
		return items
	}
	var text string
	if json.Unmarshal(q.Input, &text) == nil {
		b, _ := json.Marshal(map[string]any{"type": "message", "role": "user", "content": text})
		return []json.RawMessage{b}
	}
	return nil
}

// toolNames returns the name of each function tool, the type of a
// built-in one (local_shell, web_search, ...), and <namespace>__<tool>
// for each tool of a namespace (mcp__tm__echo: Claude's name of an MCP
// tool).
func (q responsesRequest) toolNames() []string {
	var names []string
	for _, raw := range q.Tools {
		var t struct {
			Type, Name string
			Tools      []struct{ Name string }
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		switch {
		case t.Type == "namespace":
			for _, nested := range t.Tools {
				names = append(names, t.Name+"__"+nested.Name)
			}
		case t.Name == "":
			names = append(names, t.Type)
		default:
			names = append(names, t.Name)
		}
	}
	return names
}

// namespaces returns the names of the request's tool namespaces (Codex
// offers an MCP server's tools in one, mcp__<server>).
func (q responsesRequest) namespaces() []string {
	var names []string
	for _, raw := range q.Tools {
		var t struct{ Type, Name string }
		if json.Unmarshal(raw, &t) == nil && t.Type == "namespace" {
			names = append(names, t.Name)
		}
	}
	return names
}

func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request, body []byte, keyOK bool) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeOpenAIError(w, HTTPError{Status: 400, Message: "body is not JSON: " + err.Error()})
		return
	}
	items := req.items()
	rec := Request{At: time.Now(), Path: r.URL.Path, Model: req.Model, Stream: req.Stream, System: instructions(req.Instructions, items),
		Messages: items, Tools: req.toolNames(), Header: cleanHeader(r.Header), Body: body, KeyOK: keyOK}
	step, usage, model, ok := s.answer(w, r, rec, lastFunctionOutput(items), "gpt-stub", writeOpenAIError)
	if !ok {
		return
	}
	resp := newResponse(model, outputOf(step, rec.Tools, req.namespaces()), usage)
	if req.Stream {
		writeResponsesStream(w, resp)
		return
	}
	resp["status"] = "completed"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// instructions returns the request's instructions, or else the texts of
// its developer and system messages (where Codex puts its system prompt),
// joined by "\n".
func instructions(given string, items []json.RawMessage) string {
	if given != "" {
		return given
	}
	var texts []string
	for _, raw := range items {
		var m struct {
			Role    string `json:"role"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if json.Unmarshal(raw, &m) != nil || (m.Role != "developer" && m.Role != "system") {
			continue
		}
		for _, c := range m.Content {
			texts = append(texts, c.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// lastFunctionOutput returns the output of the last function_call_output
// item (a string, or its text parts joined by "\n").
func lastFunctionOutput(items []json.RawMessage) string {
	text := ""
	for _, raw := range items {
		var it struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		}
		if json.Unmarshal(raw, &it) != nil || !strings.HasSuffix(it.Type, "call_output") {
			continue
		}
		var str string
		if json.Unmarshal(it.Output, &str) == nil {
			text = str
			continue
		}
		var parts []struct{ Text string }
		if json.Unmarshal(it.Output, &parts) == nil {
			var texts []string
			for _, p := range parts {
				texts = append(texts, p.Text)
			}
			text = strings.Join(texts, "\n")
		}
	}
	return text
}

var respSeq struct {
	sync.Mutex
	n int
}

func respID(prefix string) string {
	respSeq.Lock()
	defer respSeq.Unlock()
	respSeq.n++
	return fmt.Sprintf("%s_stub_%d", prefix, respSeq.n)
}

// outputOf returns the output items of a step: a message for its text,
// then a function_call for its tool call. A tool call named "Bash" (the
// Messages scripts' shell tool) goes to the request's shell tool when it
// offers no Bash, so that one script drives every agent; a name
// <namespace>__<tool> of one of the request's namespaces (Claude's name
// of an MCP tool, mcp__<server>__<tool>) calls tool in that namespace.
func outputOf(step Step, tools, namespaces []string) []map[string]any {
	var out []map[string]any
	if step.Text != "" || step.ToolUse == nil {
		out = append(out, map[string]any{"type": "message", "id": respID("msg"), "status": "completed", "role": "assistant",
			"content": []map[string]any{{"type": "output_text", "text": step.Text, "annotations": []any{}}}})
	}
	if step.ToolUse != nil {
		name, in := shellCall(step.ToolUse.Name, step.ToolUse.Input, tools)
		args, _ := json.Marshal(in)
		call := map[string]any{"type": "function_call", "id": respID("fc"), "call_id": respID("call"),
			"name": name, "arguments": string(args), "status": "completed"}
		for _, ns := range namespaces {
			if tool, ok := strings.CutPrefix(name, ns+"__"); ok {
				call["namespace"], call["name"] = ns, tool
			}
		}
		out = append(out, call)
	}
	return out
}

// shellCall maps a "Bash" call with input {"command": "..."} onto the shell
// tool an OpenAI request offers: exec_command ({"cmd": "..."}), shell
// ({"command": ["bash", "-lc", "..."]}), or Qwen Code's run_shell_command
// ({"command": "..."}). Any other call is left as it is.
func shellCall(name string, in map[string]any, tools []string) (string, map[string]any) {
	if in == nil {
		in = map[string]any{}
	}
	if name != "Bash" || contains(tools, "Bash") {
		return name, in
	}
	cmd, _ := in["command"].(string)
	switch {
	case contains(tools, "exec_command"):
		return "exec_command", map[string]any{"cmd": cmd}
	case contains(tools, "shell"):
		return "shell", map[string]any{"command": []string{"bash", "-lc", cmd}}
	case contains(tools, "shell_command"):
		return "shell_command", map[string]any{"command": cmd}
	case contains(tools, "run_shell_command"):
		return "run_shell_command", map[string]any{"command": cmd}
	}
	return name, in
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// openAIInput is the input tokens of u as OpenAI counts them: the whole
// prompt, cached or not.
func openAIInput(u Usage) int64 {
	return u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

func newResponse(model string, output []map[string]any, u Usage) map[string]any {
	input := openAIInput(u)
	return map[string]any{
		"id": respID("resp"), "object": "response", "created_at": time.Now().Unix(), "status": "in_progress",
		"model": model, "output": output, "error": nil, "incomplete_details": nil,
		"usage": map[string]any{
			"input_tokens":          input,
			"input_tokens_details":  map[string]any{"cached_tokens": u.CacheReadInputTokens},
			"output_tokens":         u.OutputTokens,
			"output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens":          input + u.OutputTokens,
		},
	}
}

// writeResponsesStream sends resp as the API's server-sent events:
// response.created, per item output_item.added, its deltas and
// output_item.done, then response.completed with the usage.
func writeResponsesStream(w http.ResponseWriter, resp map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	seq := 0
	send := func(event string, data map[string]any) {
		data["type"], data["sequence_number"] = event, seq
		seq++
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	output := resp["output"].([]map[string]any)
	created := map[string]any{}
	for k, v := range resp {
		created[k] = v
	}
	created["output"], created["usage"] = []any{}, nil
	send("response.created", map[string]any{"response": created})
	send("response.in_progress", map[string]any{"response": created})
	for i, item := range output {
		sendItem(send, i, item)
	}
	resp["status"] = "completed"
	send("response.completed", map[string]any{"response": resp})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func sendItem(send func(string, map[string]any), i int, item map[string]any) {
	id := item["id"]
	switch item["type"] {
	case "message":
		send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
			"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []any{}}})
		text := item["content"].([]map[string]any)[0]["text"].(string)
		part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
		send("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": part})
		for _, chunk := range chunks(text, deltaSize(len(text))) {
			send("response.output_text.delta", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "delta": chunk})
		}
		send("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": text})
		done := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
		send("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": done})
	case "function_call":
		send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
			"type": "function_call", "id": id, "call_id": item["call_id"], "name": item["name"], "arguments": "", "status": "in_progress"}})
		send("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": item["arguments"]})
		send("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "arguments": item["arguments"]})
	}
	send("response.output_item.done", map[string]any{"output_index": i, "item": item})
}

// writeOpenAIError answers e in OpenAI's error shape (both of its APIs).
func writeOpenAIError(w http.ResponseWriter, e HTTPError) {
	writeErrorAs(w, e, openAIErrorType, func(typ, msg string) any {
		return map[string]any{"error": map[string]any{"type": typ, "message": msg, "param": nil, "code": typ}}
	})
}

func openAIErrorType(status int) string {
	switch status {
	case 400, 404:
		return "invalid_request_error"
	case 401:
		return "invalid_api_key"
	case 403:
		return "permission_denied"
	case 429:
		return "rate_limit_exceeded"
	}
	return "server_error"
}
