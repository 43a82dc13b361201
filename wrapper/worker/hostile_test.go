package worker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// What a prompt injection can make the agent print, through the real
// CLIs: stop outputs the design does not allow, a stop output of 512 KB,
// a deeply nested result, control characters and invalid UTF-8 in what
// the wrapper republishes. Each task gets exactly one output that
// decodes, none of them cancelled or retryable, and the worker serves the
// next task.
func TestHostileAgentOutput(t *testing.T) {
	// Varied text: Droid stops a model answer that repeats itself
	// exactly ("LLM output entered an exact repetition cycle").
	var nested strings.Builder
	pad := variedText(300)
	for i := range 300 {
		fmt.Fprintf(&nested, `{"k%d":[`, i)
	}
	nested.WriteString("1")
	for i := range 300 {
		nested.WriteString("]" + strings.Repeat(" ", int(pad[i]-'a')%5) + "}")
	}
	huge := variedText(512 << 10)
	// The stop outputs the wrapper refuses whatever the agent (claudeOnly)
	// run through Claude alone: the refusal is the wrapper's, and each
	// costs a second turn asking for a valid one. What tests how a CLI
	// carries the text (nesting, control bytes, size) runs through each.
	cases := []struct {
		name       string
		text       string
		check      func(t *testing.T, o protocol.Output)
		claudeOnly bool
	}{
		{"cancelled status", "Stopping here.\n{\"status\": \"cancelled\"}", failedWith(protocol.CodeNoStopOutput), false},
		{"unknown status", `{"status": "running", "result": {"pct": 10}}`, failedWith(protocol.CodeNoStopOutput), true},
		{"blocked without a question", `{"status": "blocked"}`, failedWith(protocol.CodeNoStopOutput), true},
		{"result not an object", `{"status": "complete", "result": [1, 2]}`, failedWith(protocol.CodeNoStopOutput), true},
		{"deeply nested result", `{"status": "complete", "result": ` + nested.String() + `}`, func(t *testing.T, o protocol.Output) {
			if o.Status != protocol.StatusComplete || !strings.HasPrefix(string(o.Result), `{"k0":[{"k1":[`) {
				t.Fatalf("nested: status %s error %+v result %.80s", o.Status, o.Error, o.Result)
			}
		}, false},
		// Raw control characters inside a JSON string make it no JSON:
		// there the stop output spells them as escapes; around it they
		// are raw, with bytes that are not UTF-8.
		{"control characters and invalid UTF-8", "line\x00one\x1b[31m red \x07\xff\xfe\xc3(\r\n{\"status\": \"blocked\", \"question\": \"which \\u0000\\u001b[0m\xff\\ud800one?\"}",
			func(t *testing.T, o protocol.Output) {
				if o.Status != protocol.StatusBlocked || !strings.Contains(o.Question, "which") {
					t.Fatalf("control characters: %+v (error %+v)", o, o.Error)
				}
				for _, s := range []string{o.Response, o.Question} {
					if !utf8.ValidString(s) {
						t.Errorf("republished text is not valid UTF-8: %q", s)
					}
				}
			}, false},
		// Half a megabyte through the CLIs. Claude 2.1.197 exits before a
		// result line of megabytes has left its stdout pipe (Node writes
		// to a pipe asynchronously), so larger ones are the wrapper's own
		// test: TestReplayOfAFiftyMegabyteStopOutput.
		{"stop output of 512 KB", `{"status": "complete", "result": {"blob": "` + huge + `"}}`, func(t *testing.T, o protocol.Output) {
			if o.Status != protocol.StatusComplete || len(o.Result) < 512<<10 {
				t.Fatalf("512 KB: %s %+v (result %d bytes)", o.Status, o.Error, len(o.Result))
			}
		}, false},
	}
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		e.start(environ...)
		in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
		sent := 0
		for i, c := range cases {
			if c.claudeOnly && agentType != protocol.AgentClaude {
				continue
			}
			sent++
			// Every model call of the task answers the hostile text (an
			// agent may make more than one call a task).
			stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: c.text}})
			e.send(in, protocol.Task{RequestID: "hostile-" + string(rune('a'+i)), ProjectID: "p", Prompt: c.name, ForceNewSession: true})
			outs := e.waitOutputs(out, sent, 3*time.Minute)
			o := outs[sent-1]
			if o.RequestID != "hostile-"+string(rune('a'+i)) {
				t.Fatalf("%s: output for %s", c.name, o.RequestID)
			}
			doc, _ := json.Marshal(o)
			if !json.Valid(doc) {
				t.Fatalf("%s: output does not re-encode", c.name)
			}
			t.Run(c.name, func(t *testing.T) { c.check(t, o) })
		}
		stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: `{"status": "complete"}`}})
		e.send(in, protocol.Task{RequestID: "after", ProjectID: "p", Prompt: "and now?"})
		outs := e.waitOutputs(out, sent+1, 2*time.Minute)
		if o := outs[sent]; o.RequestID != "after" || o.Status != protocol.StatusComplete {
			t.Fatalf("the task after: %+v (error %+v)", o, o.Error)
		}
	})
}

// variedText is n bytes of letters that do not repeat in a short cycle.
func variedText(n int) string {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = 'a' + byte(x%26)
	}
	return string(b)
}

func failedWith(code protocol.Code) func(t *testing.T, o protocol.Output) {
	return func(t *testing.T, o protocol.Output) {
		t.Helper()
		if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != code || o.Error.Retryable {
			t.Fatalf("status %s error %+v, want failed %s, not retryable", o.Status, o.Error, code)
		}
	}
}
