package agent

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// parseFile feeds a transcript through a parser the way Run does.
func parseFile(t *testing.T, path string, p Parser) Outcome {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var o Outcome
	lr := NewLineReader(f, 0)
	for {
		line, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range p.ParseLine(line) {
			o.record(ev, 0)
		}
	}
	return o
}

func TestClaudeReferenceToolUse(t *testing.T) {
	o := parseFile(t, "testdata/reference/claude-2.1.197-tooluse.stream.jsonl", ClaudeParser{})
	if o.Init == nil || o.Init.SessionID != "5b716dd0-044f-4748-812b-f78e7bde30c0" || o.Init.Model != "claude-opus-4-8[1m]" {
		t.Fatalf("init = %+v", o.Init)
	}
	r := o.Result
	if r == nil || r.IsError || r.Subtype != "success" || r.Turns != 2 || r.SessionID != "5b716dd0-044f-4748-812b-f78e7bde30c0" {
		t.Fatalf("result = %+v", r)
	}
	// The result's usage sums both calls; the context is the last call's.
	if want := (protocol.Usage{Input: 4000, Output: 160, CacheRead: 18000, CacheCreation: 200}); r.Usage != want {
		t.Errorf("summed usage = %+v, want %+v", r.Usage, want)
	}
	if o.LastTurn == nil || o.LastTurn.Usage.Context() != 11100 {
		t.Errorf("last turn = %+v, want context 2000+9000+100", o.LastTurn)
	}
	if r.CostUSD != 0.03425 || r.ContextWindow != 1000000 {
		t.Errorf("cost %v window %d", r.CostUSD, r.ContextWindow)
	}
	v := Judge(o, false)
	if v.Status != protocol.StatusComplete || string(v.Result) != `{"pr": 42}` || v.Error != nil {
		t.Errorf("verdict = %+v", v)
	}
}

func TestClaudeReferenceToolCallsAndRetries(t *testing.T) {
	var calls []string
	retries := 0
	f, _ := os.ReadFile("testdata/reference/claude-2.1.197-tooluse.stream.jsonl")
	for _, line := range bytes.Split(f, []byte("\n")) {
		for _, ev := range (ClaudeParser{}).ParseLine(line) {
			if ev.ToolCall != nil {
				calls = append(calls, ev.ToolCall.Name+":"+string(ev.ToolCall.Input))
			}
		}
	}
	if len(calls) != 1 || !strings.HasPrefix(calls[0], `Bash:{"command":"echo PROGRESS-CALLED`) {
		t.Errorf("tool calls = %v", calls)
	}
	f, _ = os.ReadFile("testdata/reference/claude-2.1.197-api401.stream.jsonl")
	var last APIRetry
	for _, line := range bytes.Split(f, []byte("\n")) {
		for _, ev := range (ClaudeParser{}).ParseLine(line) {
			if ev.Retry != nil {
				retries++
				last = *ev.Retry
			}
		}
	}
	if retries != 9 || last.Attempt != 9 || last.MaxRetries != 10 || last.Status != 401 || last.DelayMS <= 0 {
		t.Errorf("retries = %d, last %+v", retries, last)
	}
}

func TestClaudeReferenceResume(t *testing.T) {
	o := parseFile(t, "testdata/reference/claude-2.1.197-resume.stream.jsonl", ClaudeParser{})
	if o.Result == nil || o.Result.SessionID == "" || o.Result.Turns != 1 {
		t.Fatalf("result = %+v", o.Result)
	}
}

func TestDroidReferenceToolUse(t *testing.T) {
	o := parseFile(t, "testdata/reference/droid-0.225.2-tooluse.stream.jsonl", DroidParser{})
	if o.Init == nil || o.Init.SessionID != "21b10fc7-8c4f-45fc-b8c0-be38fcc6bb04" || o.Init.Model != "custom:Fake-0" {
		t.Fatalf("init = %+v", o.Init)
	}
	r := o.Result
	if r == nil || r.IsError || r.Turns != 2 || r.Usage != (protocol.Usage{Input: 3000, Output: 120, CacheRead: 8000}) {
		t.Fatalf("result = %+v", r)
	}
	if o.LastTurn != nil {
		t.Errorf("droid reports no per-call usage, got %+v", o.LastTurn)
	}
	v := Judge(o, false)
	if v.Status != protocol.StatusComplete || string(v.Result) != `{"files": 1}` {
		t.Errorf("verdict = %+v", v)
	}
}

func TestDroidErrorLines(t *testing.T) {
	var o Outcome
	for _, line := range []string{
		`{"type":"system","subtype":"init","session_id":"s1","model":"custom:Fake-0"}`,
		`{"type":"error","source":"agent_loop","message":"401 {\"error\":{\"message\":\"invalid x-api-key\"}}","session_id":"s1"}`,
		`{"type":"error","source":"cli","message":"Exec failed","session_id":"s1"}`,
	} {
		for _, ev := range (DroidParser{}).ParseLine([]byte(line)) {
			o.record(ev, 0)
		}
	}
	if o.Result == nil || !o.Result.IsError || o.Result.APIErrorStatus != 401 || !strings.Contains(o.Result.Text, "invalid x-api-key") || !strings.HasSuffix(o.Result.Text, "Exec failed") {
		t.Fatalf("result = %+v", o.Result)
	}
	if v := Judge(o, false); v.Error == nil || v.Error.Code != protocol.CodeAgentError || !strings.Contains(v.Error.Message, "API status 401") {
		t.Fatalf("verdict = %+v", v)
	}
}

func TestParsersIgnoreGarbage(t *testing.T) {
	for _, line := range []string{"", "not json", "[1,2]", `{"type":"mystery"}`, `{"type":"result"`, "\xff\xfe", `"string"`, `{"type":"assistant","message":5}`} {
		for name, p := range map[string]Parser{"claude": ClaudeParser{}, "droid": DroidParser{}, "codex": &CodexParser{}} {
			for _, ev := range p.ParseLine([]byte(line)) {
				if ev.Result != nil || ev.Init != nil {
					t.Errorf("%s: %q gave %+v", name, line, ev)
				}
			}
		}
	}
}

func TestLineReader(t *testing.T) {
	big := strings.Repeat("y", 50<<20)
	input := "a\r\nb\n" + big + "\n" + strings.Repeat("z", 300) + "\nlast"
	lr := NewLineReader(strings.NewReader(input), 200)
	var got []string
	var long int
	for {
		line, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err == ErrLineTooLong {
			long++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
	if strings.Join(got, ",") != "a,b,last" || long != 2 {
		t.Fatalf("lines %q, long %d", got, long)
	}
	lr = NewLineReader(strings.NewReader(big+"\n"), 0)
	line, err := lr.Next()
	if err != nil || len(line) != len(big) {
		t.Fatalf("50 MB line: len %d, %v", len(line), err)
	}
}

func TestCleanTerminalLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"\x1b[1;32m{\"type\":\"result\"}\x1b[0m\r", `{"type":"result"}`},
		{"\x1b]0;title\x07{\"a\":1}", `{"a":1}`},
		{"progress 10%\rprogress 100%\r", "progress 100%"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := string(CleanTerminalLine([]byte(tt.in))); got != tt.want {
			t.Errorf("CleanTerminalLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestReferenceFixturesMatchShared(t *testing.T) {
	// The fixtures are copies of ../shared/reference; when that folder is
	// beside the checkout, they must not have drifted from it.
	shared := filepath.Join("..", "..", "..", "shared", "reference")
	entries, err := os.ReadDir(shared)
	if err != nil {
		t.Skipf("no shared reference folder beside the checkout: %v", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".jsonl") && !strings.HasSuffix(e.Name(), ".stderr") {
			continue
		}
		a, _ := os.ReadFile(filepath.Join(shared, e.Name()))
		b, err := os.ReadFile(filepath.Join("testdata", "reference", e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("testdata/reference/%s differs from the shared reference (%v)", e.Name(), err)
		}
	}
}

// An API failure ends Claude with is_error and subtype "success": the
// error message must say the API's status and error instead.
func TestAgentErrorMessageSaysTheAPIError(t *testing.T) {
	tests := []struct {
		name    string
		o       Outcome
		want    []string
		notWant []string
	}{
		{name: "captured claude 2.1.197, HTTP 401 from the model API",
			o:       parseFile(t, "testdata/captured/claude-2.1.197-api401-result.stream.jsonl", ClaudeParser{}),
			want:    []string{"(API status 401, API error authentication_failed)", "Invalid API key"},
			notWant: []string{"subtype success"}},
		{name: "no status on the result: the last retry's",
			o: Outcome{Result: &Result{IsError: true, Subtype: "success", Text: "API Error: Connection error."},
				LastRetry: &APIRetry{Attempt: 10, Status: 529, Error: "overloaded"}},
			want: []string{"(API status 529, API error overloaded)"}, notWant: []string{"subtype"}},
		{name: "a subtype that tells",
			o:    Outcome{Result: &Result{IsError: true, Subtype: "error_max_turns", Text: "Reached max turns"}},
			want: []string{"(subtype error_max_turns)"}},
		{name: "nothing known",
			o:    Outcome{Result: &Result{IsError: true, Subtype: "success", Text: "?"}},
			want: []string{"(no API status)"}, notWant: []string{"subtype"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Judge(tt.o, false)
			if v.Error == nil || v.Error.Code != protocol.CodeAgentError {
				t.Fatalf("verdict %+v", v)
			}
			for _, s := range tt.want {
				if !strings.Contains(v.Error.Message, s) {
					t.Errorf("message %q lacks %q", v.Error.Message, s)
				}
			}
			for _, s := range tt.notWant {
				if strings.Contains(v.Error.Message, s) {
					t.Errorf("message %q says %q", v.Error.Message, s)
				}
			}
		})
	}
}

// A run without a result (a timeout) still used the API calls it
// reported; Claude repeats a message's usage on each of its lines.
func TestTurnsUsageCountsEachMessageOnce(t *testing.T) {
	var o Outcome
	u := func(n int64) protocol.Usage { return protocol.Usage{Input: n, Output: 1} }
	for _, ev := range []Event{
		{Turn: &Turn{MessageID: "m1", Usage: u(100)}},
		{Turn: &Turn{MessageID: "m1", Usage: u(100)}}, // the same message's next content line
		{Turn: &Turn{MessageID: "m2", Usage: u(200)}},
	} {
		o.record(ev, 0)
	}
	if got := o.TurnsUsage(); got != (protocol.Usage{Input: 300, Output: 2}) {
		t.Fatalf("turns usage %+v, want input 300, output 2", got)
	}
}
