package stubmodel

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// postOpenAI posts body to one of the OpenAI APIs' paths with key as the
// bearer token.
func postOpenAI(t *testing.T, url, path, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func postResponses(t *testing.T, url, body string) *http.Response {
	return postOpenAI(t, url, "/v1/responses", "secret", body)
}

type sseEvent struct {
	name string
	data map[string]any
}

func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var name string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			name = ev
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			var v map[string]any
			if err := json.Unmarshal([]byte(d), &v); err != nil {
				t.Fatalf("event %s: %v", name, err)
			}
			if v["type"] != name {
				t.Fatalf("event %s carries type %v", name, v["type"])
			}
			out = append(out, sseEvent{name, v})
		}
	}
	return out
}

// codexRequest is shaped as Codex 0.171 sends it: the system prompt as a
// developer message, exec_command as its shell tool.
const codexRequest = `{"model":"gpt-x","stream":true,"input":[
 {"type":"message","role":"developer","content":[{"type":"input_text","text":"SYS"}]},
 {"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}],
 "tools":[{"type":"function","name":"exec_command"},{"type":"web_search"}]}`

func TestResponsesStreamsTextAndAShellCall(t *testing.T) {
	s, err := Start(Script{Steps: []Step{{Text: "Listing.", ToolUse: &ToolUse{Name: "Bash", Input: map[string]any{"command": "ls"}}}},
		Usage: Usage{InputTokens: 100, OutputTokens: 7, CacheReadInputTokens: 900}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp := postResponses(t, s.URL, codexRequest)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	var names []string
	var text, args, fn string
	var usage map[string]any
	for _, e := range events {
		names = append(names, e.name)
		switch e.name {
		case "response.output_text.delta":
			text += e.data["delta"].(string)
		case "response.output_item.done":
			if item := e.data["item"].(map[string]any); item["type"] == "function_call" {
				args, fn = item["arguments"].(string), item["name"].(string)
			}
		case "response.completed":
			usage = e.data["response"].(map[string]any)["usage"].(map[string]any)
		}
	}
	want := "response.created,response.in_progress," +
		"response.output_item.added,response.content_part.added,response.output_text.delta,response.output_text.done,response.content_part.done,response.output_item.done," +
		"response.output_item.added,response.function_call_arguments.delta,response.function_call_arguments.done,response.output_item.done," +
		"response.completed"
	if strings.Join(names, ",") != want {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(names, ","), want)
	}
	if text != "Listing." || fn != "exec_command" || args != `{"cmd":"ls"}` {
		t.Fatalf("text %q, call %s(%s)", text, fn, args)
	}
	cached := usage["input_tokens_details"].(map[string]any)["cached_tokens"]
	if usage["input_tokens"] != 1000.0 || usage["output_tokens"] != 7.0 || cached != 900.0 {
		t.Fatalf("usage %v", usage)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/responses" || reqs[0].System != "SYS" || !strings.Contains(reqs[0].Text(), "hello") ||
		strings.Join(reqs[0].Tools, ",") != "exec_command,web_search" || reqs[0].Header.Get("Authorization") != "[redacted]" {
		t.Fatalf("recorded %+v", reqs)
	}
}

func TestResponsesErrorsDelaysAndToolResults(t *testing.T) {
	s, err := Start(Script{Steps: []Step{
		{Error: &HTTPError{Status: 429, Header: map[string]string{"retry-after": "1"}}},
		{Text: `{"status": "complete", "result": {"echo": "` + ToolResultPlaceholder + `"}}`, DelayMS: 150},
		{ToolUse: &ToolUse{Name: "read_file", Input: map[string]any{"path": "a"}}},
		{ToolUse: &ToolUse{Name: "mcp__tm__echo", Input: map[string]any{"text": "x"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetAPIKey("secret")

	resp := postResponses(t, s.URL, codexRequest)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"rate_limit_exceeded"`) {
		t.Fatalf("error step: %d %s", resp.StatusCode, b)
	}

	start := time.Now()
	resp = postResponses(t, s.URL, `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"said \"hi\""}]}`)
	var full struct {
		Status string
		Output []struct {
			Type    string
			Content []struct{ Text string }
		}
	}
	json.NewDecoder(resp.Body).Decode(&full)
	resp.Body.Close()
	if time.Since(start) < 150*time.Millisecond {
		t.Fatal("the delay was not held")
	}
	if full.Status != "completed" || len(full.Output) != 1 || full.Output[0].Content[0].Text != `{"status": "complete", "result": {"echo": "said \"hi\""}}` {
		t.Fatalf("non-streaming answer %+v", full)
	}

	// Another tool than Bash goes out as it is.
	resp = postResponses(t, s.URL, codexRequest)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	var call map[string]any
	for _, e := range events {
		if item, _ := e.data["item"].(map[string]any); e.name == "response.output_item.done" {
			call = item
		}
	}
	if call["name"] != "read_file" || call["arguments"] != `{"path":"a"}` || call["call_id"] == "" {
		t.Fatalf("call %v", call)
	}

	// Claude's name of an MCP tool calls it in Codex's namespace.
	var mcp struct {
		Output []struct{ Type, Name, Namespace, Arguments string }
	}
	resp = postResponses(t, s.URL, `{"model":"m","input":"x","tools":[{"type":"namespace","name":"mcp__tm","tools":[{"type":"function","name":"echo"}]}]}`)
	json.NewDecoder(resp.Body).Decode(&mcp)
	resp.Body.Close()
	if len(mcp.Output) != 1 || mcp.Output[0].Namespace != "mcp__tm" || mcp.Output[0].Name != "echo" || mcp.Output[0].Arguments != `{"text":"x"}` {
		t.Fatalf("MCP call %+v", mcp.Output)
	}

	resp = postOpenAI(t, s.URL, "/v1/responses", "wrong", codexRequest)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(b), `"error":{`) {
		t.Fatalf("a wrong key: %d %s", resp.StatusCode, b)
	}
	if reqs := s.Requests(); len(reqs) != 4 || !reqs[0].KeyOK || reqs[2].Step != 2 || !slices.Contains(reqs[3].Tools, "mcp__tm__echo") {
		t.Fatalf("recorded %d requests", len(reqs))
	}
}
