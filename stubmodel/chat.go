package stubmodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The OpenAI Chat Completions API (POST /v1/chat/completions), which Qwen
// Code speaks, driven by the same Script and Step types as the other two
// APIs: a text step is the assistant message's content, a tool call step
// one entry of its tool_calls (its Input as the arguments JSON), an error
// step an error answer in OpenAI's shape. A "Bash" call goes to the
// request's shell tool as for the Responses API (shellCall). Usage maps
// as OpenAI counts it: prompt_tokens is the whole prompt (InputTokens +
// CacheReadInputTokens + CacheCreationInputTokens), of which
// prompt_tokens_details.cached_tokens (CacheReadInputTokens) were read
// from the cache. A streamed answer carries its usage in a last chunk
// only when the request asks for it (stream_options.include_usage), as
// the API does.

// chatRequest is the part of a Chat Completions request the stub reads.
type chatRequest struct {
	Model         string            `json:"model"`
	Stream        bool              `json:"stream"`
	Messages      []json.RawMessage `json:"messages"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// chatMessage is the part of one message the stub reads.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatText is a message's content: a string, or its text parts joined by
// "\n".
func chatText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type, Text string
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" || p.Type == "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// split returns the texts of the system (and developer) messages joined
// by "\n", the other messages as sent, and the content of the last
// message when it is a tool result.
func (q chatRequest) split() (system string, turns []json.RawMessage, toolResult string) {
	var sys []string
	var last chatMessage
	for _, raw := range q.Messages {
		var m chatMessage
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		if m.Role == "system" || m.Role == "developer" {
			sys = append(sys, chatText(m.Content))
			continue
		}
		turns = append(turns, raw)
		last = m
	}
	if last.Role == "tool" {
		toolResult = chatText(last.Content)
	}
	return strings.Join(sys, "\n"), turns, toolResult
}

func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, body []byte, keyOK bool) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeOpenAIError(w, HTTPError{Status: 400, Message: "body is not JSON: " + err.Error()})
		return
	}
	system, turns, toolResult := req.split()
	rec := Request{At: time.Now(), Path: r.URL.Path, Model: req.Model, Stream: req.Stream, System: system,
		Messages: turns, Header: cleanHeader(r.Header), Body: body, KeyOK: keyOK}
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, t.Function.Name)
	}
	step, usage, model, ok := s.answer(w, r, rec, toolResult, "gpt-stub", writeOpenAIError)
	if !ok {
		return
	}
	id, msg, finish := respID("chatcmpl"), chatAnswer(step, rec.Tools), "stop"
	if msg["tool_calls"] != nil {
		finish = "tool_calls"
	}
	if req.Stream {
		var u map[string]any
		if req.StreamOptions.IncludeUsage {
			u = chatUsage(usage)
		}
		writeChatStream(w, chatChunks{id: id, model: model, msg: msg, finish: finish, usage: u})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}}, "usage": chatUsage(usage)})
}

// chatAnswer is the assistant message of a step: its text, then its tool
// call.
func chatAnswer(step Step, tools []string) map[string]any {
	msg := map[string]any{"role": "assistant", "content": step.Text}
	if step.ToolUse != nil {
		name, in := shellCall(step.ToolUse.Name, step.ToolUse.Input, tools)
		args, _ := json.Marshal(in)
		msg["tool_calls"] = []map[string]any{{"id": respID("call"), "type": "function",
			"function": map[string]any{"name": name, "arguments": string(args)}}}
	}
	return msg
}

// chatUsage is a usage as the Chat Completions API reports it.
func chatUsage(u Usage) map[string]any {
	prompt := openAIInput(u)
	return map[string]any{"prompt_tokens": prompt, "completion_tokens": u.OutputTokens, "total_tokens": prompt + u.OutputTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.CacheReadInputTokens}}
}

// chatChunks is one streamed answer: its assistant message, why it
// finished, and its usage (nil: not asked for).
type chatChunks struct {
	id, model, finish string
	msg               map[string]any
	usage             map[string]any
}

// writeChatStream sends the answer as the API's chunks: the role, the
// text in deltas, the tool call's name and then its arguments, the finish
// reason, the usage when asked for, and [DONE].
func writeChatStream(w http.ResponseWriter, c chatChunks) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	send := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": created, "model": c.model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil)
	if text, _ := c.msg["content"].(string); text != "" {
		for _, chunk := range chunks(text, deltaSize(len(text))) {
			send(map[string]any{"content": chunk}, nil)
		}
	}
	if calls, ok := c.msg["tool_calls"].([]map[string]any); ok {
		for i, call := range calls {
			fn := call["function"].(map[string]any)
			send(map[string]any{"tool_calls": []map[string]any{{"index": i, "id": call["id"], "type": "function",
				"function": map[string]any{"name": fn["name"], "arguments": ""}}}}, nil)
			send(map[string]any{"tool_calls": []map[string]any{{"index": i, "function": map[string]any{"arguments": fn["arguments"]}}}}, nil)
		}
	}
	send(map[string]any{}, c.finish)
	if c.usage != nil {
		b, _ := json.Marshal(map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": created, "model": c.model,
			"choices": []any{}, "usage": c.usage})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
