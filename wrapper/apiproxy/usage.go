package apiproxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// The proxy meters the model's answers as they pass, for an agent that
// reports no cost of its own (Droid): the wrapper prices each call's
// tokens as they arrive, and stops a task whose cost passes its
// max_budget_usd while the agent is still working.

// UsageFunc sees the tokens of the model's answers (Messages API, the
// Responses API's response.completed, Chat Completions' usage) as they
// stream through the proxy: each call gives what one answer added since
// the last call for it (a streamed answer reports its input and cache
// tokens with message_start, its output tokens with each message_delta),
// and the model the answer names. It runs on the goroutine that copies
// the answer to the agent, so it must not block.
type UsageFunc func(model string, delta protocol.Usage)

// RefuseFunc is asked before each model call is forwarded: a non-empty
// code refuses the call without reaching the upstream, answered with
// that code and msg (Refusal). The codes are the protocol's
// (protocol.RefusedModelNoTask, protocol.RefusedModelOverBudget).
type RefuseFunc func() (code, msg string)

const (
	// maxUsageLine bounds the line of a streamed answer the meter keeps
	// while it arrives: message_start and message_delta lines are a few
	// hundred bytes; longer lines (large content deltas) are passed over.
	maxUsageLine = 256 << 10
	// maxUsageBody bounds the JSON answer the meter keeps to read its
	// usage at the end; a larger answer's usage goes unmetered.
	maxUsageBody = 16 << 20
)

// isModelCall says whether a request may cost tokens: a POST (the
// Messages API's .../messages; a token count's answer carries no usage,
// and any other endpoint that reports usage the same way is metered
// too). A GET (a model listing, a batch's results) is not.
func isModelCall(r *http.Request) bool { return r.Method == http.MethodPost }

// meter wraps the body of a successful model answer with a usageReader,
// when its encoding can be read (the proxy asks the upstream for gzip
// itself, so the transport has decoded it already).
func (p *Proxy) meter(resp *http.Response) {
	if p.cfg.OnUsage == nil || resp.StatusCode/100 != 2 || resp.Request == nil || !isModelCall(resp.Request) {
		return
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		p.log.Warn("model API proxy: an answer in an encoding the meter cannot read goes unmetered", "content_encoding", enc)
		return
	}
	ct := resp.Header.Get("Content-Type")
	sse := strings.HasPrefix(ct, "text/event-stream")
	if !sse && !strings.HasPrefix(ct, "application/json") {
		return
	}
	resp.Body = &usageReader{ReadCloser: resp.Body, sse: sse, report: p.cfg.OnUsage}
}

// usageReader passes an answer through unchanged and reports its usage.
// One goroutine reads it (the proxy's copy to the agent).
type usageReader struct {
	io.ReadCloser
	sse    bool
	report UsageFunc

	buf   []byte         // SSE: the line in progress; JSON: the body so far
	over  bool           // buf outgrew its bound: this line (SSE) or body (JSON) is passed over
	model string         // SSE: the model of the message in flight
	sent  protocol.Usage // SSE: what was reported of the message in flight
	eof   bool           // the answer was read to its end
}

// drainFor bounds how long Close reads on an answer the agent stopped
// reading, to meter the rest of it.
var drainFor = 30 * time.Second

// Close meters what is left of an answer its client stopped reading (it
// went away after the status line, or mid-stream): the upstream bills it
// all, and a client that hangs up early must not leave it unmetered. The
// proxy's upstream request outlives its client for that (Proxy.rewrite);
// the rest is read for at most drainFor.
func (r *usageReader) Close() error {
	if !r.eof {
		t := time.AfterFunc(drainFor, func() { _ = r.ReadCloser.Close() })
		buf := make([]byte, 32<<10)
		for !r.eof {
			if _, err := r.Read(buf); err != nil {
				break
			}
		}
		t.Stop()
	}
	return r.ReadCloser.Close()
}

func (r *usageReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err == io.EOF {
		r.eof = true
	}
	if r.sse {
		r.scan(p[:n])
		return n, err
	}
	r.keep(p[:n], maxUsageBody)
	if err == io.EOF && !r.over {
		v := gjson.ParseBytes(r.buf)
		switch v.Get("object").String() {
		case "response":
			r.response(v)
		case "chat.completion":
			r.sent = r.chat(v, r.sent)
		default:
			r.update(v.Get("model").String(), protocol.Usage{}, v.Get("usage"))
		}
		r.over = true // reported: once
	}
	return n, err
}

// keep appends b to the buffer unless that passes limit.
func (r *usageReader) keep(b []byte, limit int) {
	if r.over || len(b) == 0 {
		return
	}
	if len(r.buf)+len(b) > limit {
		r.over, r.buf = true, r.buf[:0]
		return
	}
	r.buf = append(r.buf, b...)
}

// scan splits a chunk of a server-sent event stream into lines.
func (r *usageReader) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			r.keep(b, maxUsageLine)
			return
		}
		r.keep(b[:i], maxUsageLine)
		if !r.over {
			r.line(bytes.TrimSuffix(r.buf, []byte("\r")))
		}
		r.buf, r.over = r.buf[:0], false
		b = b[i+1:]
	}
}

// line reads the usage of a message_start or message_delta event's data
// (Messages API), of a response.completed (Responses API), or of a chunk
// with a usage (Chat Completions).
func (r *usageReader) line(line []byte) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok || (!bytes.Contains(data, []byte("message_start")) && !bytes.Contains(data, []byte("message_delta")) &&
		!bytes.Contains(data, []byte("response.completed")) && !bytes.Contains(data, []byte(`"usage"`))) {
		return
	}
	v := gjson.ParseBytes(data)
	if v.Get("object").String() == "chat.completion.chunk" {
		r.sent = r.chat(v, r.sent)
		return
	}
	switch v.Get("type").String() {
	case "response.completed":
		r.response(v.Get("response"))
	case "message_start":
		m := v.Get("message")
		r.model, r.sent = m.Get("model").String(), protocol.Usage{}
		r.sent = r.update(r.model, r.sent, m.Get("usage"))
	case "message_delta":
		r.sent = r.update(r.model, r.sent, v.Get("usage"))
	}
}

// response reports the usage of a Responses API answer (OpenAI's, which
// Codex speaks): its input_tokens include the cached ones
// (input_tokens_details.cached_tokens), which count as cache reads. The
// answer gives its usage once, at its end; an answer whose final event is
// longer than maxUsageLine (it repeats the whole output) goes unmetered.
func (r *usageReader) response(v gjson.Result) {
	u := v.Get("usage")
	if !u.IsObject() {
		return
	}
	in, cached := max(u.Get("input_tokens").Int(), 0), max(u.Get("input_tokens_details.cached_tokens").Int(), 0)
	cached = min(cached, in)
	d := protocol.Usage{Input: in - cached, CacheRead: cached, Output: max(u.Get("output_tokens").Int(), 0)}
	if d != (protocol.Usage{}) {
		r.report(v.Get("model").String(), d)
	}
}

// chat reports what the usage of a Chat Completions answer or chunk v
// (OpenAI's, which Qwen Code speaks) adds to sent, and returns the new
// totals. Its prompt_tokens include the cached ones
// (prompt_tokens_details.cached_tokens), which count as cache reads. The
// API gives the usage once, in the last chunk; a server that repeats its
// running totals in every chunk is counted once too.
func (r *usageReader) chat(v gjson.Result, sent protocol.Usage) protocol.Usage {
	u := v.Get("usage")
	if !u.IsObject() {
		return sent
	}
	r.model = v.Get("model").String()
	in, cached := max(u.Get("prompt_tokens").Int(), 0), max(u.Get("prompt_tokens_details.cached_tokens").Int(), 0)
	cached = min(cached, in)
	return r.add(r.model, sent, protocol.Usage{Input: in - cached, CacheRead: cached, Output: max(u.Get("completion_tokens").Int(), 0)})
}

// update reports what the usage u (the API's running totals for one
// message, any of its fields present) adds to sent, and returns the new
// totals.
func (r *usageReader) update(model string, sent protocol.Usage, u gjson.Result) protocol.Usage {
	if !u.IsObject() {
		return sent
	}
	var got protocol.Usage
	for _, f := range []struct {
		name string
		dst  *int64
	}{
		{"input_tokens", &got.Input}, {"output_tokens", &got.Output},
		{"cache_read_input_tokens", &got.CacheRead}, {"cache_creation_input_tokens", &got.CacheCreation},
	} {
		*f.dst = u.Get(f.name).Int()
	}
	return r.add(model, sent, got)
}

// add reports what the running totals got add to sent (a field that did
// not grow adds nothing), and returns the new totals.
func (r *usageReader) add(model string, sent, got protocol.Usage) protocol.Usage {
	now := protocol.Usage{Input: max(sent.Input, got.Input), Output: max(sent.Output, got.Output),
		CacheRead: max(sent.CacheRead, got.CacheRead), CacheCreation: max(sent.CacheCreation, got.CacheCreation)}
	delta := protocol.Usage{Input: now.Input - sent.Input, Output: now.Output - sent.Output,
		CacheRead: now.CacheRead - sent.CacheRead, CacheCreation: now.CacheCreation - sent.CacheCreation}
	if delta != (protocol.Usage{}) {
		r.report(model, delta)
	}
	return now
}
