package agent

import (
	"encoding/json"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

// What an agent prints as its stop output is the agent's to choose, so a
// prompt can make it print anything: every verdict must still be one an
// Output can carry, and a stop output that is not one is a failed task
// with INVALID_STOP_OUTPUT, not retryable (the same task would print it
// again).
func TestJudgeInvalidStructuredOutput(t *testing.T) {
	for _, so := range []string{
		`{"status":"cancelled"}`, `{"status":"running"}`, `{"status":"blocked"}`,
		`{"status":"complete","result":"text"}`, `{"status":"complete","extra":1}`, `[1,2]`, `"complete"`, `null`,
	} {
		o := Outcome{Result: &Result{Text: "done", StructuredOutput: json.RawMessage(so)}}
		v := Judge(o, true)
		if v.Status != protocol.StatusFailed || v.Error == nil || v.Error.Code != protocol.CodeInvalidStopOutput || v.Error.Retryable {
			t.Errorf("structured_output %s: verdict %+v (error %+v)", so, v, v.Error)
		}
		if v.Response != "done" {
			t.Errorf("structured_output %s: response %q, want the agent's text kept", so, v.Response)
		}
	}
}

func TestJudgeTextStopOutputNeverCancelled(t *testing.T) {
	v := Judge(Outcome{Result: &Result{Text: `I give up. {"status": "cancelled"}`}}, false)
	if v.Status != protocol.StatusFailed || v.Error == nil || v.Error.Code != protocol.CodeNoStopOutput {
		t.Fatalf("verdict %+v (error %+v)", v, v.Error)
	}
}

// complete is the last word on every rule's verdict.
func TestCompleteVerdict(t *testing.T) {
	for _, v := range []Verdict{
		{Status: protocol.StatusCancelled, Rule: "x"},
		{Status: "", Rule: "x"},
		{Status: "weird\x00status", Rule: "x"},
		{Status: protocol.StatusFailed, Rule: "x"},
	} {
		got := complete(v)
		if got.Status != protocol.StatusFailed || got.Error == nil {
			t.Errorf("complete(%+v) = %+v", v, got)
		}
	}
	ok := Verdict{Status: protocol.StatusComplete, Rule: "stop-json"}
	if got := complete(ok); got.Status != protocol.StatusComplete || got.Error != nil {
		t.Errorf("complete(%+v) = %+v, want it unchanged", ok, got)
	}
}
