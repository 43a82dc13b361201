package stubmodel

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages?beta=true", strings.NewReader(body))
	req.Header.Set("x-api-key", "secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestScriptStreamErrorsAndRecording(t *testing.T) {
	s, err := Start(Script{Steps: []Step{
		{ToolUse: &ToolUse{Name: "Bash", Input: map[string]any{"command": "ls"}}},
		{Error: &HTTPError{Status: 529}},
		{Text: "final"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	resp := post(t, s.URL, `{"model":"m","stream":true,"system":[{"type":"text","text":"SYS"}],"messages":[{"role":"user","content":"hello"}],"tools":[{"name":"Bash"}]}`)
	var events []string
	var input string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, ev)
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, "input_json_delta") {
			var v struct {
				Delta struct {
					PartialJSON string `json:"partial_json"`
				}
			}
			json.Unmarshal([]byte(d), &v)
			input = v.Delta.PartialJSON
		}
	}
	resp.Body.Close()
	want := "message_start,content_block_start,content_block_delta,content_block_stop,message_delta,message_stop"
	if strings.Join(events, ",") != want || input != `{"command":"ls"}` {
		t.Fatalf("events %v, tool input %q", events, input)
	}

	resp = post(t, s.URL, `{"model":"m","messages":[]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 529 || !strings.Contains(string(b), "overloaded_error") {
		t.Fatalf("error step: %d %s", resp.StatusCode, b)
	}

	resp = post(t, s.URL, `{"model":"m","messages":[]}`)
	var msg struct {
		Content []struct{ Text string } `json:"content"`
		Usage   Usage                   `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&msg)
	resp.Body.Close()
	if len(msg.Content) != 1 || msg.Content[0].Text != "final" || msg.Usage != DefaultUsage {
		t.Fatalf("non-streaming answer %+v", msg)
	}

	resp = post(t, s.URL, `{"model":"m","messages":[]}`) // past the script: the default final text
	json.NewDecoder(resp.Body).Decode(&msg)
	resp.Body.Close()
	if !strings.Contains(msg.Content[0].Text, `"status": "complete"`) {
		t.Fatalf("fallback %+v", msg)
	}

	reqs := s.Requests()
	if len(reqs) != 4 || reqs[0].System != "SYS" || reqs[0].Text() != "hello\n" || reqs[0].Tools[0] != "Bash" ||
		reqs[0].Header.Get("X-Api-Key") != "[redacted]" || reqs[3].Step != -1 {
		t.Fatalf("recorded %+v", reqs[0])
	}
}

func TestLoadScriptAndLoopbackOnly(t *testing.T) {
	if _, err := LoadScript([]byte(`{"steps":[{"delay_ms":5}]}`)); err == nil {
		t.Error("a step with nothing to answer was accepted")
	}
	if _, err := LoadScript([]byte(`{"steps":[{"error":{"status":200}}]}`)); err == nil {
		t.Error("an error with status 200 was accepted")
	}
	if _, err := LoadScript([]byte(`{"stepz":[]}`)); err == nil {
		t.Error("an unknown field was accepted")
	}
	if s, err := LoadScript([]byte(`{"steps":[{"text":"hi","repeat":2}]}`)); err != nil || len(s.Steps) != 1 {
		t.Errorf("valid script: %v", err)
	}
	if _, err := StartOn("10.0.0.1:0", Script{}); err == nil {
		t.Error("a non-loopback address was accepted")
	}
}

func TestSetAPIKeyRefusesOtherKeys(t *testing.T) {
	s, err := Start(Script{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetAPIKey("secret")
	if resp := post(t, s.URL, `{"model":"m","messages":[]}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("the right key: %s", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/messages", strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set("Authorization", "Bearer wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong key: %s, want 401", resp.Status)
	}
	if reqs := s.Requests(); len(reqs) != 1 || !reqs[0].KeyOK {
		t.Fatalf("recorded %+v, want one request with KeyOK", reqs)
	}
	if other := s.OtherRequests(); len(other) != 1 || other[0] != "401 POST /v1/messages" {
		t.Fatalf("other requests %q", other)
	}
}

func TestToolResultPlaceholderQuotesTheLastToolResult(t *testing.T) {
	s, err := Start(Script{Steps: []Step{{Text: `{"status": "complete", "result": {"echo": "` + ToolResultPlaceholder + `"}}`, Repeat: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct{ name, content, want string }{
		{"text blocks", `[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"said \"hi\""}]}]`, `said "hi"`},
		{"a string", `[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"t1","content":"plain"}]`, "plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, s.URL, `{"model":"m","messages":[{"role":"user","content":"go"},{"role":"user","content":`+tc.content+`}]}`)
			defer resp.Body.Close()
			var msg struct {
				Content []struct{ Text string } `json:"content"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil || len(msg.Content) != 1 {
				t.Fatalf("answer: %+v, %v", msg, err)
			}
			var stop struct {
				Result struct{ Echo string } `json:"result"`
			}
			if err := json.Unmarshal([]byte(msg.Content[0].Text), &stop); err != nil || stop.Result.Echo != tc.want {
				t.Fatalf("text %q: echo %q, want %q (%v)", msg.Content[0].Text, stop.Result.Echo, tc.want, err)
			}
		})
	}
}

func TestChunksKeepRunesWhole(t *testing.T) {
	s := strings.Repeat("é€x", 100)
	var joined strings.Builder
	for _, c := range chunks(s, 7) {
		if !utf8.ValidString(c) || len(c) > 7 {
			t.Fatalf("chunk %q", c)
		}
		joined.WriteString(c)
	}
	if joined.String() != s {
		t.Fatal("chunks do not join back")
	}
	if n := len(chunks(strings.Repeat("x", 50<<20), deltaSize(50<<20))); n > 1001 {
		t.Fatalf("50 MB in %d deltas", n)
	}
}
