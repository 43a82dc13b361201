package stubmodel

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func postChat(t *testing.T, url, body string) *http.Response {
	return postOpenAI(t, url, "/v1/chat/completions", "secret", body)
}

// readChunks reads a Chat Completions stream: its chunks, and whether it
// ended with [DONE].
func readChunks(t *testing.T, r io.Reader) (chunks []map[string]any, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if d == "[DONE]" {
			done = true
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		if v["object"] != "chat.completion.chunk" {
			t.Fatalf("chunk of object %v", v["object"])
		}
		chunks = append(chunks, v)
	}
	return chunks, done
}

// qwenRequest is shaped as Qwen Code sends it: the system prompt as a
// system message, run_shell_command as its shell tool, the usage asked
// for.
const qwenRequest = `{"model":"qwen-x","stream":true,"stream_options":{"include_usage":true},"messages":[
 {"role":"system","content":"SYS"},
 {"role":"user","content":[{"type":"text","text":"hello"}]}],
 "tools":[{"type":"function","function":{"name":"run_shell_command"}},{"type":"function","function":{"name":"mcp__tm__echo"}}]}`

// A streamed answer: the role, the text in deltas, a "Bash" call as the
// request's run_shell_command, the finish reason, the usage as OpenAI
// counts it, then [DONE]; the request is recorded with its system prompt,
// turns and tools.
func TestChatStreamsTextAndAShellCall(t *testing.T) {
	s, err := Start(Script{Steps: []Step{{Text: "Listing.", ToolUse: &ToolUse{Name: "Bash", Input: map[string]any{"command": "ls"}}}},
		Usage: Usage{InputTokens: 100, OutputTokens: 7, CacheReadInputTokens: 900}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp := postChat(t, s.URL, qwenRequest)
	chunks, done := readChunks(t, resp.Body)
	resp.Body.Close()
	var text, fn, args, finish string
	var usage map[string]any
	for _, c := range chunks {
		if u, ok := c["usage"].(map[string]any); ok {
			usage = u
		}
		choices := c["choices"].([]any)
		if len(choices) == 0 {
			continue
		}
		choice := choices[0].(map[string]any)
		if f, ok := choice["finish_reason"].(string); ok {
			finish = f
		}
		delta := choice["delta"].(map[string]any)
		if s, ok := delta["content"].(string); ok {
			text += s
		}
		if calls, ok := delta["tool_calls"].([]any); ok {
			f := calls[0].(map[string]any)["function"].(map[string]any)
			if n, ok := f["name"].(string); ok {
				fn = n
			}
			args += f["arguments"].(string)
		}
	}
	if !done || text != "Listing." || fn != "run_shell_command" || args != `{"command":"ls"}` || finish != "tool_calls" {
		t.Fatalf("done %v, text %q, call %s(%s), finish %q", done, text, fn, args, finish)
	}
	cached := usage["prompt_tokens_details"].(map[string]any)["cached_tokens"]
	if usage["prompt_tokens"] != 1000.0 || usage["completion_tokens"] != 7.0 || usage["total_tokens"] != 1007.0 || cached != 900.0 {
		t.Fatalf("usage %v", usage)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/chat/completions" || reqs[0].System != "SYS" || reqs[0].Text() != "hello\n" ||
		strings.Join(reqs[0].Tools, ",") != "run_shell_command,mcp__tm__echo" || reqs[0].Header.Get("Authorization") != "[redacted]" {
		t.Fatalf("recorded %+v", reqs)
	}
}

// Errors in OpenAI's shape (a wrong key too), delays, the last tool
// result quoted through the placeholder, a JSON answer, and no usage chunk
// in a stream that did not ask for one.
func TestChatErrorsDelaysAndToolResults(t *testing.T) {
	s, err := Start(Script{Steps: []Step{
		{Error: &HTTPError{Status: 429, Header: map[string]string{"retry-after": "1"}}},
		{Text: `{"status": "complete", "result": {"echo": "` + ToolResultPlaceholder + `"}}`, DelayMS: 150},
		{ToolUse: &ToolUse{Name: "mcp__tm__echo", Input: map[string]any{"text": "x"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetAPIKey("secret")

	resp := postChat(t, s.URL, qwenRequest)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"rate_limit_exceeded"`) {
		t.Fatalf("error step: %d %s", resp.StatusCode, b)
	}

	start := time.Now()
	resp = postChat(t, s.URL, `{"model":"m","messages":[{"role":"user","content":"go"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"run_shell_command","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"said \"hi\""}]}`)
	var full struct {
		Object  string
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
		}
	}
	json.NewDecoder(resp.Body).Decode(&full)
	resp.Body.Close()
	if time.Since(start) < 150*time.Millisecond {
		t.Fatal("the delay was not held")
	}
	if full.Object != "chat.completion" || len(full.Choices) != 1 || full.Choices[0].FinishReason != "stop" ||
		full.Choices[0].Message.Content != `{"status": "complete", "result": {"echo": "said \"hi\""}}` || full.Usage.PromptTokens != 11100 {
		t.Fatalf("JSON answer %+v", full)
	}

	// Another tool than Bash goes out as it is; no usage unless asked.
	resp = postChat(t, s.URL, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	chunks, done := readChunks(t, resp.Body)
	resp.Body.Close()
	var name string
	for _, c := range chunks {
		if _, ok := c["usage"]; ok {
			t.Errorf("a usage chunk that was not asked for: %v", c)
		}
		for _, ch := range c["choices"].([]any) {
			if calls, ok := ch.(map[string]any)["delta"].(map[string]any)["tool_calls"].([]any); ok {
				if n, ok := calls[0].(map[string]any)["function"].(map[string]any)["name"].(string); ok {
					name = n
				}
			}
		}
	}
	if !done || name != "mcp__tm__echo" {
		t.Fatalf("done %v, call %q", done, name)
	}

	resp = postOpenAI(t, s.URL, "/v1/chat/completions", "wrong", qwenRequest)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(b), `"invalid_api_key"`) {
		t.Fatalf("a wrong key: %d %s", resp.StatusCode, b)
	}
	if reqs := s.Requests(); len(reqs) != 3 || !reqs[0].KeyOK || reqs[1].Step != 1 || len(s.OtherRequests()) != 1 {
		t.Fatalf("recorded %d requests, other %q", len(reqs), s.OtherRequests())
	}
}
