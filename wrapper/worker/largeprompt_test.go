package worker

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// A prompt of the protocol's largest size (1 MiB; one argument of a
// command line may hold 128 KiB) reaches the real agents whole: the
// wrapper hands it over on stdin, not in argv.
func TestLargestPromptReachesRealAgents(t *testing.T) {
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		e.start(environ...)
		in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
		head, tail := "Summarise this log. BEGIN ", " END-OF-PROMPT"
		prompt := head + strings.Repeat("log line x\n", (protocol.MaxPromptBytes-len(head)-len(tail))/11)
		prompt += strings.Repeat("y", protocol.MaxPromptBytes-len(prompt)-len(tail)) + tail
		if len(prompt) != protocol.MaxPromptBytes {
			t.Fatalf("prompt of %d bytes", len(prompt))
		}
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "Read it.\n{\"status\": \"complete\", \"result\": {\"ok\": true}}"}}})
		e.send(in, protocol.Task{RequestID: "big", Prompt: prompt})
		o := e.waitOutputs(out, 1, 90*time.Second)[0]
		if agentType == protocol.AgentQwen {
			// Qwen Code checks the prompt against its model's context
			// window (128 Ki tokens for a model it does not know) before
			// it sends it, and says how many tokens it counted: the whole
			// prompt reached it.
			m := regexp.MustCompile(`Estimated prompt tokens: (\d+)`).FindStringSubmatch(o.Response)
			if n, _ := strconv.Atoi(m1(m)); o.Status != protocol.StatusFailed || n < protocol.MaxPromptBytes/4 {
				t.Fatalf("Qwen Code: output %+v (error %+v): want its refusal counting the whole prompt (%d tokens or more)", o, o.Error, protocol.MaxPromptBytes/4)
			}
			return
		}
		if o.Status != protocol.StatusComplete {
			t.Fatalf("output %+v (error %+v)", o, o.Error)
		}
		reqs := stub.Requests()
		if len(reqs) == 0 {
			t.Fatal("the model got no request")
		}
		got := reqs[len(reqs)-1].Text()
		if !strings.Contains(got, head) || !strings.Contains(got, tail) || len(got) < protocol.MaxPromptBytes {
			t.Fatalf("the model got %d bytes of text (has head %v, tail %v), want the whole %d-byte prompt",
				len(got), strings.Contains(got, head), strings.Contains(got, tail), protocol.MaxPromptBytes)
		}
	})
}

// Instructions of the largest size a spec may give (64 KiB) reach the real
// agents whole, through CLAUDE.md or AGENTS.md.
func TestLargestInstructionsReachRealAgents(t *testing.T) {
	eachRealAgent(t, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
		head, tail := "Standing instructions. BEGIN ", " END-OF-INSTRUCTIONS"
		body := strings.Repeat("Keep the build green.\n", (protocol.MaxInstructionsBytes-len(head)-len(tail))/22)
		e.cfg.Instructions = head + body + strings.Repeat("z", protocol.MaxInstructionsBytes-len(head)-len(body)-len(tail)) + tail
		if len(e.cfg.Instructions) != protocol.MaxInstructionsBytes {
			t.Fatalf("instructions of %d bytes", len(e.cfg.Instructions))
		}
		e.start(environ...)
		in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
		stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "{\"status\": \"complete\", \"result\": {}}"}}})
		e.send(in, protocol.Task{RequestID: "instructed", Prompt: "Follow your instructions."})
		if o := e.waitOutputs(out, 1, 90*time.Second)[0]; o.Status != protocol.StatusComplete {
			t.Fatalf("output %+v (error %+v)", o, o.Error)
		}
		reqs := stub.Requests()
		if len(reqs) == 0 {
			t.Fatal("the model got no request")
		}
		r := reqs[len(reqs)-1]
		got := r.System + r.Text()
		if !strings.Contains(got, head) || !strings.Contains(got, tail) {
			t.Fatalf("the model did not get the whole instructions (head %v, tail %v, %d bytes of system and text)",
				strings.Contains(got, head), strings.Contains(got, tail), len(got))
		}
	})
}

// m1 is a match's first group, or "".
func m1(m []string) string {
	if len(m) < 2 {
		return ""
	}
	return m[1]
}
