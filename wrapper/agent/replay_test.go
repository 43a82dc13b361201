package agent

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// A result line of 50 MB (an agent told to end with a huge stop output)
// is read and judged like any other. The stop output is searched for in
// the text's last 16 MiB (protocol.MaxStopSearch): one of 15 MB, or of
// 2 MB nested in code, or made of many small objects is found; one that
// begins before the last 16 MiB of a longer text fails the task
// OUTPUT_TOO_LARGE, not retryable; a small stop output at the end of a
// huge text is found.
func TestReplayOfAFiftyMegabyteStopOutput(t *testing.T) {
	line := func(text string) []byte {
		b, err := json.Marshal(map[string]any{"type": "result", "subtype": "success", "is_error": false, "result": text, "session_id": "s"})
		if err != nil {
			t.Fatal(err)
		}
		return append(b, '\n')
	}
	blob := strings.Repeat("x", 50<<20)
	for _, tt := range []struct {
		name string
		text string
		code protocol.Code
	}{
		{"a stop output of 50 MB", `{"status": "complete", "result": {"blob": "` + blob + `"}}`, protocol.CodeOutputTooLarge},
		{"50 MB of text, then a stop output", blob + ` {"status": "complete", "result": {"n": 1}}`, ""},
		{"a stop output of 15 MB, then text", `{"status": "complete", "result": {"n": 1, "blob": "` + blob[:15<<20] + `"}} done`, ""},
		{"a stop output of 2 MB nested in text with braces", "func f() { return }\n" + `{"status": "complete", "result": {"n": 1, "code": "` + strings.Repeat(`if x {\"a\": 1} `, 2<<20/16) + `"}}`, ""},
		{"text of 2 MB and no stop output", blob[:2<<20], protocol.CodeNoStopOutput},
		{"a stop output of 150,000 small objects", `{"status": "complete", "result": {"n": 1, "items": [` + strings.TrimSuffix(strings.Repeat(`{"k": 1},`, 150_000), ",") + `]}}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]byte(`{"type":"system","subtype":"init","session_id":"s"}`+"\n"), line(tt.text)...)
			o, err := Replay(bytes.NewReader(in), ClaudeParser{})
			if err != nil || o.Result == nil {
				t.Fatalf("replay: %v, result %v", err, o.Result != nil)
			}
			v := Judge(o, false)
			switch {
			case tt.code == "" && (v.Status != protocol.StatusComplete || !strings.HasPrefix(string(v.Result), `{"n": 1`)):
				t.Fatalf("verdict %s %v %s", v.Status, v.Error, v.Result)
			case tt.code != "" && (v.Error == nil || v.Error.Code != tt.code || v.Error.Retryable):
				t.Fatalf("verdict %s %v, want %s", v.Status, v.Error, tt.code)
			}
		})
	}
}
