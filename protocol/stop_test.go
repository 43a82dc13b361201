package protocol

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestFindStopOutput(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		ok       bool
		status   OutputStatus
		result   string
		question string
	}{
		{"fenced block (Claude's reference final text)", "All done.\n```json\n{\"status\": \"complete\", \"result\": {\"pr\": 42}}\n```", true, StatusComplete, `{"pr": 42}`, ""},
		{"bare at end (Droid's reference final text)", "Finished.\n{\"status\": \"complete\", \"result\": {\"files\": 1}}", true, StatusComplete, `{"files": 1}`, ""},
		{"blocked", `I need input. {"status":"blocked","question":"Which DB?"}`, true, StatusBlocked, "", "Which DB?"},
		{"nested status does not win", `{"status":"complete","result":{"status":"failed","n":1}}`, true, StatusComplete, `{"status":"failed","n":1}`, ""},
		{"last of two wins", `{"status":"failed","result":null} then {"status":"complete"}`, true, StatusComplete, "", ""},
		{"invalid later object ignored", `{"status":"complete"} and {"status":"maybe"}`, true, StatusComplete, "", ""},
		{"blocked without question is not a stop output", `{"status":"blocked"}`, false, "", "", ""},
		{"no json", "I fixed it, trust me.", false, "", "", ""},
		{"broken json", `{"status":"complete",`, false, "", "", ""},
		{"other object", `{"answer":42}`, false, "", "", ""},
		{"empty", "", false, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := FindStopOutput(tt.text)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tt.ok, got)
			}
			if !ok {
				return
			}
			if got.Status != tt.status || string(got.Result) != tt.result || got.Question != tt.question {
				t.Fatalf("got %+v (result %s)", got, got.Result)
			}
		})
	}
}

func TestFindStopOutputHugeText(t *testing.T) {
	text := strings.Repeat("{", 3<<20) + `{"status":"complete"}`
	if s, ok := FindStopOutput(text); !ok || s.Status != StatusComplete {
		t.Fatalf("got %+v %v", s, ok)
	}
}

func TestStopOutputSchemaIsTheShippedFile(t *testing.T) {
	b, err := os.ReadFile("schema/stop_output.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if StopOutputSchema() != string(b) {
		t.Fatal("embedded schema differs from the file")
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v["type"] != "object" {
		t.Fatal("stop output schema is not an object schema")
	}
}

func TestDecodeStopOutputNullResult(t *testing.T) {
	s, err := DecodeStopOutput([]byte(`{"status":"failed","result":null}`))
	if err != nil || s.Result != nil {
		t.Fatalf("%+v %v", s, err)
	}
}

// Only complete, blocked and failed end a stop output: cancelled is the
// runtime's status for a task a cancel ended, and an agent printing it
// must not pass for one.
func TestStopOutputRefusesRuntimeStatuses(t *testing.T) {
	for _, in := range []string{
		`{"status":"cancelled"}`, `{"status":"running"}`, `{"status":""}`, `{"status":"COMPLETE"}`,
		`{"status":"blocked"}`, `{"status":"complete","result":[1]}`,
	} {
		if s, err := DecodeStopOutput([]byte(in)); err == nil {
			t.Errorf("DecodeStopOutput(%s) = %+v, want an error", in, s)
		}
		if s, ok := FindStopOutput("done: " + in); ok {
			t.Errorf("FindStopOutput(%s) = %+v, want none", in, s)
		}
	}
	if s, ok := FindStopOutput(`{"status":"complete"} then {"status":"cancelled"}`); !ok || s.Status != StatusComplete {
		t.Errorf("FindStopOutput skipped past an invalid one to %+v, %v", s, ok)
	}
}
