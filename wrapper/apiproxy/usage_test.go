package apiproxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// usageLog records what a proxy's OnUsage saw.
type usageLog struct {
	mu     sync.Mutex
	models []string
	deltas []protocol.Usage
}

func (l *usageLog) add(model string, d protocol.Usage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.models, l.deltas = append(l.models, model), append(l.deltas, d)
}

func (l *usageLog) total() (protocol.Usage, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var u protocol.Usage
	for _, d := range l.deltas {
		u = u.Add(d)
	}
	return u, append([]string(nil), l.models...)
}

// The stub model's answers, streamed and not, through the proxy: the
// meter sees each call's usage, once, under the model the answer names;
// errors and token counts are not metered; the agent gets the same bytes.
func TestProxyMetersUsage(t *testing.T) {
	stub := startStub(t)
	u1 := stubmodel.Usage{InputTokens: 3000, OutputTokens: 120, CacheReadInputTokens: 8000, CacheCreationInputTokens: 50}
	u2 := stubmodel.Usage{InputTokens: 10, OutputTokens: 7}
	stub.SetScript(stubmodel.Script{Model: "agentvisor", Steps: []stubmodel.Step{
		{Text: strings.Repeat("long answer ", 100), Usage: &u1},
		{Error: &stubmodel.HTTPError{Status: 400}},
		{ToolUse: &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{"command": "ls"}}, Usage: &u2},
	}})
	var log usageLog
	p := startProxy(t, Config{Upstream: stub.URL, APIKey: realKey, OnUsage: log.add})
	auth := map[string]string{"X-Api-Key": p.Token}

	resp, body := post(t, p.URL, auth, streamBody)
	if resp.StatusCode != 200 || !strings.Contains(body, "event: message_delta") || strings.Count(body, "text_delta") < 10 {
		t.Fatalf("streamed answer %s: %q", resp.Status, body)
	}
	if u, models := log.total(); u != (protocol.Usage{Input: 3000, Output: 120, CacheRead: 8000, CacheCreation: 50}) || models[0] != "agentvisor" {
		t.Fatalf("streamed: metered %+v of %v", u, models)
	}
	if resp, _ := post(t, p.URL, auth, streamBody); resp.StatusCode != 400 {
		t.Fatalf("error step: %s", resp.Status)
	}
	resp, body = post(t, p.URL, auth, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"tool_use"`) {
		t.Fatalf("JSON answer %s: %q", resp.Status, body)
	}
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/v1/messages/count_tokens", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("X-Api-Key", p.Token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("count_tokens: %v %v", resp, err)
	}
	u, models := log.total()
	if want := (protocol.Usage{Input: 3010, Output: 127, CacheRead: 8000, CacheCreation: 50}); u != want || len(models) != 3 {
		t.Fatalf("metered %+v in %d reports (%v), want %+v: the message_start, message_delta and JSON answers", u, len(models), models, want)
	}
}

// The meter reads the event stream however it is cut: one byte per read,
// CRLF line ends, running totals in message_delta (the API's newer
// answers repeat the input figures there), and a long content line.
func TestUsageReaderSSE(t *testing.T) {
	stream := "event: message_start\r\n" +
		`data: {"type":"message_start","message":{"id":"m1","model":"claude-sonnet-4-5-20250929","usage":{"input_tokens":1500,"cache_read_input_tokens":400,"cache_creation_input_tokens":30,"output_tokens":1}}}` + "\r\n\r\n" +
		"event: content_block_delta\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat("x", maxUsageLine) + ` message_delta"}}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":40}}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{},"usage":{"input_tokens":1500,"cache_read_input_tokens":400,"cache_creation_input_tokens":30,"output_tokens":95}}` + "\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	var log usageLog
	r := &usageReader{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(stream))), sse: true, report: log.add}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != stream {
		t.Fatalf("the stream changed on its way: %v", err)
	}
	u, models := log.total()
	if u != (protocol.Usage{Input: 1500, Output: 95, CacheRead: 400, CacheCreation: 30}) {
		t.Fatalf("metered %+v", u)
	}
	if len(models) != 3 || models[0] != "claude-sonnet-4-5-20250929" || models[2] != models[0] {
		t.Fatalf("reports %v: want message_start and two deltas, under the answer's model", models)
	}
	if d := log.deltas[0]; d.Input != 1500 || d.Output != 1 {
		t.Fatalf("message_start reported %+v: the input is known before the answer streams", d)
	}
}

// A Chat Completions stream: chunks with "usage": null, then running
// totals repeated in two chunks (as some OpenAI-compatible servers send
// them) are counted once, the cached prompt tokens as cache reads.
func TestUsageReaderChatChunks(t *testing.T) {
	chunk := func(usage string) string {
		return `data: {"id":"c","object":"chat.completion.chunk","model":"qwen-x","choices":[],"usage":` + usage + "}\n\n"
	}
	stream := chunk("null") + chunk(`{"prompt_tokens":1000,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":900}}`) +
		chunk(`{"prompt_tokens":1000,"completion_tokens":12,"prompt_tokens_details":{"cached_tokens":900}}`) + "data: [DONE]\n\n"
	var log usageLog
	r := &usageReader{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(stream))), sse: true, report: log.add}
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if u, models := log.total(); u != (protocol.Usage{Input: 100, CacheRead: 900, Output: 12}) || len(models) != 2 || models[0] != "qwen-x" {
		t.Fatalf("metered %+v in %v", u, models)
	}
}

func TestUsageReaderJSON(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		want protocol.Usage
	}{
		{"usage", `{"id":"m","type":"message","model":"agentvisor","content":[],"usage":{"input_tokens":12,"output_tokens":3,"cache_read_input_tokens":5,"cache_creation_input_tokens":1}}`,
			protocol.Usage{Input: 12, Output: 3, CacheRead: 5, CacheCreation: 1}},
		{"no usage", `{"id":"m","type":"message","model":"agentvisor","content":[]}`, protocol.Usage{}},
		{"not JSON", `<html>`, protocol.Usage{}},
		{"too large", `{"pad":"` + strings.Repeat("x", maxUsageBody) + `","usage":{"input_tokens":12}}`, protocol.Usage{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log usageLog
			r := &usageReader{ReadCloser: io.NopCloser(strings.NewReader(tt.body)), report: log.add}
			got, _ := io.ReadAll(r)
			if string(got) != tt.body {
				t.Fatal("the body changed on its way")
			}
			if u, _ := log.total(); u != tt.want {
				t.Fatalf("metered %+v, want %+v", u, tt.want)
			}
		})
	}
}

// An upstream that gzips its answers (when asked) is still metered: the
// proxy asks for gzip itself, and the agent gets the answer decoded.
func TestProxyMetersGzippedAnswers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := `{"type":"message","model":"agentvisor","content":[],"usage":{"input_tokens":70,"output_tokens":9}}`
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			fmt.Fprint(zw, body)
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(b.Bytes())
			return
		}
		fmt.Fprint(w, body)
	}))
	defer up.Close()
	var log usageLog
	p := startProxy(t, Config{Upstream: up.URL, APIKey: realKey, OnUsage: log.add})
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/v1/messages", strings.NewReader(`{"model":"m"}`))
	req.Header.Set("X-Api-Key", p.Token)
	req.Header.Set("Accept-Encoding", "gzip, deflate, br")
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"input_tokens":70`) {
		t.Fatalf("the agent got %q", body)
	}
	if u, _ := log.total(); u != (protocol.Usage{Input: 70, Output: 9}) {
		t.Fatalf("metered %+v", u)
	}
}

// Refuse stops a model call before the upstream: the agent gets a 400
// with the reason; other requests pass.
func TestProxyRefusesModelCalls(t *testing.T) {
	stub := startStub(t)
	var mu sync.Mutex
	reason := ""
	p := startProxy(t, Config{Upstream: stub.URL, APIKey: realKey, Refuse: func() (string, string) {
		mu.Lock()
		defer mu.Unlock()
		if reason == "" {
			return "", ""
		}
		return protocol.RefusedModelOverBudget, reason
	}})
	auth := map[string]string{"X-Api-Key": p.Token}
	if resp, _ := post(t, p.URL, auth, streamBody); resp.StatusCode != 200 {
		t.Fatalf("before: %s", resp.Status)
	}
	mu.Lock()
	reason = "the task's max_budget_usd is spent"
	mu.Unlock()
	resp, body := post(t, p.URL, auth, streamBody)
	if resp.StatusCode != 400 || !strings.Contains(body, "invalid_request_error") || !strings.Contains(body, "max_budget_usd is spent") ||
		resp.Header.Get(RefusedCodeHeader) != protocol.RefusedModelOverBudget {
		t.Fatalf("refused call: %s %s", resp.Status, body)
	}
	if n := len(stub.Requests()); n != 1 {
		t.Fatalf("%d calls reached the model, want 1", n)
	}
}

// A client that hangs up after the status line (a script that wants only
// to spend) leaves no answer unmetered: the proxy reads the rest of the
// upstream's answer to meter it, streamed or not.
func TestProxyMetersAnAnswerItsClientLeft(t *testing.T) {
	for _, c := range []struct {
		name string
		body string
	}{
		{"json", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{"stream", streamBody},
	} {
		t.Run(c.name, func(t *testing.T) {
			stub := startStub(t)
			big := stubmodel.Usage{InputTokens: 600000, OutputTokens: 10}
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: strings.Repeat("an answer ", 2000), Usage: &big}}})
			var log usageLog
			p := startProxy(t, Config{Upstream: stub.URL, APIKey: realKey, OnUsage: log.add})
			conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				p.Token, len(c.body), c.body)
			line, err := bufio.NewReader(conn).ReadString('\n')
			conn.Close() // gone after the status line
			if err != nil || !strings.Contains(line, " 200 ") {
				t.Fatalf("status line %q %v", line, err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				if u, _ := log.total(); u.Input == big.InputTokens {
					break
				}
				if time.Now().After(deadline) {
					u, _ := log.total()
					t.Fatalf("metered %+v, want the answer's %d input tokens", u, big.InputTokens)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
