// Package stubmodel is a small stand-in for the Anthropic Messages API and
// OpenAI's Responses and Chat Completions APIs, on loopback, so that the
// real Claude Code, Factory Droid, Codex, OpenCode and Qwen Code binaries
// can run in tests, benchmarks and the demo without a vendor. It answers
// POST /v1/messages, /v1/responses and /v1/chat/completions (streaming
// SSE or not) by following one script of steps:
// text, tool calls with given input, HTTP errors and delays, each with the
// usage figures it reports. It records what every request carried (model,
// system prompt, turns) so that tests can assert on it.
package stubmodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Usage is what one answer reports, in the API's own field names.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

// ToolUse is a tool call the model makes.
type ToolUse struct {
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
}

// HTTPError is an error answer.
type HTTPError struct {
	Status  int    `json:"status"`            // e.g. 401, 429, 500, 529
	Type    string `json:"type,omitempty"`    // e.g. overloaded_error
	Message string `json:"message,omitempty"` // human text
	// Header holds headers of the answer, such as retry-after or
	// anthropic-ratelimit-requests-reset.
	Header map[string]string `json:"header,omitempty"`
}

// Step is one answer of the script. Exactly one of Text, ToolUse and Error
// is set (Text may accompany ToolUse, as a preamble).
type Step struct {
	Text    string     `json:"text,omitempty"`
	ToolUse *ToolUse   `json:"tool_use,omitempty"`
	Error   *HTTPError `json:"error,omitempty"`
	// DelayMS holds the answer back (before the headers) this long.
	DelayMS int `json:"delay_ms,omitempty"`
	// Usage overrides the script's usage for this answer.
	Usage *Usage `json:"usage,omitempty"`
	// Repeat answers this step this many times (0 or 1: once).
	Repeat int `json:"repeat,omitempty"`
}

// Script is what the server answers, in order. When the steps run out it
// answers Fallback, or a final text with a complete stop output.
type Script struct {
	Steps    []Step `json:"steps"`
	Usage    Usage  `json:"usage"`
	Fallback *Step  `json:"fallback,omitempty"`
	// Model is the model name the answers carry; default "claude-stub".
	Model string `json:"model,omitempty"`
}

// DefaultUsage is the usage of an answer when the script gives none: the
// figures of the reference transcripts (../shared/reference).
var DefaultUsage = Usage{InputTokens: 2000, OutputTokens: 80, CacheReadInputTokens: 9000, CacheCreationInputTokens: 100}

// Request is what one model request carried (any of the three APIs).
type Request struct {
	At       time.Time
	Path     string
	Model    string
	Stream   bool
	System   string            // the system prompt, text blocks joined by "\n"
	Messages []json.RawMessage // the turns as sent
	Tools    []string          // names of the tools offered
	Header   http.Header       // without credentials
	Step     int               // index of the step that answered; -1 for the fallback
	Body     json.RawMessage
	// KeyOK says the request carried the key of SetAPIKey (as x-api-key
	// or a bearer token); false when no key is set.
	KeyOK bool
}

// Text returns every text of the request's messages (user and assistant
// turns, tool results), joined by "\n", for assertions.
func (r Request) Text() string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, k := range []string{"text", "content", "output"} {
				if e, ok := x[k]; ok {
					walk(e)
				}
			}
		}
	}
	for _, m := range r.Messages {
		var v any
		if json.Unmarshal(m, &v) == nil {
			walk(v)
		}
	}
	return b.String()
}

// Server is a running stub.
type Server struct {
	URL string // http://127.0.0.1:port

	mu       sync.Mutex
	script   Script
	next     int // index into the expanded steps
	steps    []Step
	requests []Request
	other    []string // requests to other paths, and refused ones
	apiKey   string   // SetAPIKey; "" takes any credential
	srv      *http.Server
	ln       net.Listener
}

// Start starts a stub on a free port of 127.0.0.1.
func Start(script Script) (*Server, error) { return StartOn("127.0.0.1:0", script) }

// StartOn starts a stub on addr, which must be a loopback address.
func StartOn(addr string, script Script) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("stubmodel: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("stubmodel: address %q is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stubmodel: listen: %w", err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), ln: ln}
	s.SetScript(script)
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// SetScript replaces the script and starts it from its first step. The
// recorded requests are kept.
func (s *Server) SetScript(script Script) {
	var steps []Step
	for _, st := range script.Steps {
		n := max(st.Repeat, 1)
		for range n {
			steps = append(steps, st)
		}
	}
	s.mu.Lock()
	s.script, s.steps, s.next = script, steps, 0
	s.mu.Unlock()
}

// Requests returns a copy of the recorded requests to /v1/messages,
// /v1/responses and /v1/chat/completions (Request.Path tells which).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// OtherRequests returns "METHOD /path" of requests to other paths.
func (s *Server) OtherRequests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.other...)
}

// SetAPIKey makes the server answer 401 (authentication_error), as the
// real APIs do, to a request to any of its APIs that does not carry key
// as x-api-key or as a bearer token; "" takes any credential again. Refused
// requests go to OtherRequests as "401 METHOD /path".
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	s.apiKey = key
	s.mu.Unlock()
}

// Reset forgets the recorded requests.
func (s *Server) Reset() {
	s.mu.Lock()
	s.requests, s.other = nil, nil
	s.mu.Unlock()
}

// DefaultFinal is the answer when the script has run out.
var DefaultFinal = Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	responses, chat := r.URL.Path == "/v1/responses", r.URL.Path == "/v1/chat/completions"
	if r.Method != http.MethodPost || !(responses || chat || strings.HasPrefix(r.URL.Path, "/v1/messages")) {
		s.mu.Lock()
		s.other = append(s.other, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"the stub serves /v1/messages, /v1/responses and /v1/chat/completions only"}}`, http.StatusNotFound)
		return
	}
	keyOK, ok := s.authorize(w, r, responses || chat)
	if !ok {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case responses:
		s.serveResponses(w, r, body, keyOK)
		return
	case chat:
		s.serveChat(w, r, body, keyOK)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens":2000}`)
		return
	}
	var req struct {
		Model    string            `json:"model"`
		Stream   bool              `json:"stream"`
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
		Tools    []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, HTTPError{Status: 400, Type: "invalid_request_error", Message: "body is not JSON: " + err.Error()})
		return
	}
	rec := Request{At: time.Now(), Path: r.URL.Path, Model: req.Model, Stream: req.Stream,
		System: systemText(req.System), Messages: req.Messages, Header: cleanHeader(r.Header), Body: body, KeyOK: keyOK}
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, t.Name)
	}
	step, usage, model, ok := s.answer(w, r, rec, lastToolResult(req.Messages), "claude-stub", writeError)
	if !ok {
		return
	}
	msgID := fmt.Sprintf("msg_stub_%d", len(s.Requests()))
	if req.Stream {
		writeStream(w, msgID, model, step, usage)
		return
	}
	writeMessage(w, msgID, model, step, usage)
}

// authorize checks the request's credential against SetAPIKey's key and
// answers 401 in the API's own error shape (openAI: OpenAI's) when it is
// wrong; ok is false then. keyOK says the request carried the set key.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, openAI bool) (keyOK, ok bool) {
	s.mu.Lock()
	key := s.apiKey
	s.mu.Unlock()
	got := r.Header.Get("X-Api-Key")
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && got == "" {
		got = bearer
	}
	keyOK = key != "" && got == key
	if key != "" && !keyOK {
		s.mu.Lock()
		s.other = append(s.other, "401 "+r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		e := HTTPError{Status: 401, Message: "invalid x-api-key"}
		if openAI {
			writeOpenAIError(w, e)
		} else {
			writeError(w, e)
		}
		return false, false
	}
	return keyOK, true
}

// take records rec and returns the script's next step (or the fallback),
// the usage it reports and the script's model name ("" for the request's).
func (s *Server) take(rec Request) (Step, Usage, string) {
	s.mu.Lock()
	step, idx := DefaultFinal, -1
	if s.script.Fallback != nil {
		step = *s.script.Fallback
	}
	if s.next < len(s.steps) {
		step, idx = s.steps[s.next], s.next
		s.next++
	}
	rec.Step = idx
	s.requests = append(s.requests, rec)
	usage := s.script.Usage
	if usage == (Usage{}) {
		usage = DefaultUsage
	}
	model := s.script.Model
	s.mu.Unlock()
	if step.Usage != nil {
		usage = *step.Usage
	}
	if model == "" {
		model = rec.Model
	}
	return step, usage, model
}

// answer records rec and takes the script's next step, as every API
// answers it: ToolResultPlaceholder replaced by toolResult, the model the
// script's, else the request's, else fallbackModel, held for its delay.
// An error step is answered here, in the API's shape (writeErr); ok is
// false when nothing is left to answer (an error, or the client went
// away).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, rec Request, toolResult, fallbackModel string,
	writeErr func(http.ResponseWriter, HTTPError)) (step Step, usage Usage, model string, ok bool) {
	step, usage, model = s.take(rec)
	step = withToolResult(step, toolResult)
	if model == "" {
		model = fallbackModel
	}
	if !hold(r, step) {
		return step, usage, model, false
	}
	if step.Error != nil {
		writeErr(w, *step.Error)
		return step, usage, model, false
	}
	return step, usage, model, true
}

// hold waits out the step's delay; false when the client went away.
func hold(r *http.Request, step Step) bool {
	if step.DelayMS <= 0 {
		return true
	}
	select {
	case <-time.After(time.Duration(step.DelayMS) * time.Millisecond):
		return true
	case <-r.Context().Done():
		return false
	}
}

func cleanHeader(h http.Header) http.Header {
	c := h.Clone()
	for _, k := range []string{"Authorization", "X-Api-Key", "Cookie"} {
		if c.Get(k) != "" {
			c.Set(k, "[redacted]")
		}
	}
	return c
}

func systemText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil {
		parts := make([]string, 0, len(blocks))
		for _, b := range blocks {
			parts = append(parts, b.Text)
		}
		return strings.Join(parts, "\n")
	}
	return string(raw)
}

// writeError answers e in Anthropic's error shape.
func writeError(w http.ResponseWriter, e HTTPError) {
	writeErrorAs(w, e, errorType, func(typ, msg string) any {
		return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}}
	})
}

// writeErrorAs answers e: its status, headers and the body an API's shape
// makes of its type (typeOf's for the status when e has none) and message.
func writeErrorAs(w http.ResponseWriter, e HTTPError, typeOf func(status int) string, body func(typ, msg string) any) {
	if e.Type == "" {
		e.Type = typeOf(e.Status)
	}
	if e.Message == "" {
		e.Message = http.StatusText(e.Status)
	}
	for k, v := range e.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(body(e.Type, e.Message))
}

func errorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

var toolSeq struct {
	sync.Mutex
	n int
}

func toolID() string {
	toolSeq.Lock()
	defer toolSeq.Unlock()
	toolSeq.n++
	return fmt.Sprintf("toolu_stub_%d", toolSeq.n)
}

type block struct {
	Type  string         `json:"type"`
	Text  string         `json:"text,omitempty"`
	ID    string         `json:"id,omitempty"`
	Name  string         `json:"name,omitempty"`
	Input map[string]any `json:"input,omitempty"`
}

func contentOf(step Step) ([]block, string) {
	var content []block
	if step.Text != "" || step.ToolUse == nil {
		content = append(content, block{Type: "text", Text: step.Text})
	}
	stop := "end_turn"
	if step.ToolUse != nil {
		in := step.ToolUse.Input
		if in == nil {
			in = map[string]any{}
		}
		content = append(content, block{Type: "tool_use", ID: toolID(), Name: step.ToolUse.Name, Input: in})
		stop = "tool_use"
	}
	return content, stop
}

func writeMessage(w http.ResponseWriter, id, model string, step Step, u Usage) {
	content, stop := contentOf(step)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
		"stop_reason": stop, "stop_sequence": nil, "usage": u,
	})
}

func writeStream(w http.ResponseWriter, id, model string, step Step, u Usage) {
	content, stop := contentOf(step)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	startUsage := u
	startUsage.OutputTokens = 1
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage}})
	for i, b := range content {
		switch b.Type {
		case "text":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			for _, chunk := range chunks(b.Text, deltaSize(len(b.Text))) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": chunk}})
			}
		case "tool_use":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			in, _ := json.Marshal(b.Input)
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(in)}})
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": u.OutputTokens}})
	send("message_stop", map[string]any{"type": "message_stop"})
	if flusher != nil {
		flusher.Flush()
	}
}

// deltaSize is how much text one text_delta carries: 64 bytes, as the
// API's small deltas, but a text of megabytes goes in a thousand deltas
// or fewer (an agent's time goes to each delta, not to each byte).
func deltaSize(n int) int { return max(64, n/1000) }

// chunks cuts s into pieces of n bytes (the last shorter). A piece ends
// on a rune boundary, so that each is valid text in a JSON string.
func chunks(s string, n int) []string {
	if s == "" {
		return []string{""}
	}
	var out []string
	for len(s) > n {
		k := n
		for k > 1 && !utf8.RuneStart(s[k]) {
			k--
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return append(out, s)
}

// LoadScript parses a script from JSON, strictly.
func LoadScript(data []byte) (Script, error) {
	var s Script
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("stubmodel: script: %w", err)
	}
	for i, st := range s.Steps {
		if st.Error == nil && st.ToolUse == nil && st.Text == "" {
			return s, fmt.Errorf("stubmodel: script step %d: needs text, tool_use or error", i)
		}
		if st.Error != nil && (st.Error.Status < 400 || st.Error.Status > 599) {
			return s, fmt.Errorf("stubmodel: script step %d: error status %d is not 4xx or 5xx", i, st.Error.Status)
		}
	}
	return s, nil
}
