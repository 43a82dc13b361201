package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

func (e *env) sendMessage(stream, requestID, text string) {
	e.t.Helper()
	e.sendDoc(stream)(protocol.NewMessage(requestID, text).Encode())
}

func stopText(s string) string { return s + "\n{\"status\": \"complete\", \"result\": {}}" }

// A steering message reaches the model while the task runs, with the real
// claude: into the running turn (persistent process, the model's next call
// of the turn carries it), or as the next turn of the task's session when
// it came during the turn's last call (persistent: Claude answers it in a
// turn of its own, which the task waits for; per task: the wrapper resumes
// the session with it; Codex too, per task and persistent). One output,
// the steered turn's; the next task gets its own answer.
func TestSteerReachesTheModel(t *testing.T) {
	for _, tt := range []struct {
		name       string
		agent      protocol.AgentType
		persistent bool
		inTurn     bool // the message comes while a tool runs, before the turn's last call
	}{
		{"persistent-into-the-turn", protocol.AgentClaude, true, true},
		{"persistent-next-turn", protocol.AgentClaude, true, false},
		{"per-task-next-turn", protocol.AgentClaude, false, false},
		{"droid-persistent-into-the-turn", protocol.AgentDroid, true, true},
		{"droid-persistent-next-turn", protocol.AgentDroid, true, false},
		{"codex-per-task-next-turn", protocol.AgentCodex, false, false},
		{"codex-persistent-next-turn", protocol.AgentCodex, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, stub, environ := realAgentEnv(t, tt.agent)
			e.cfg.Persistent = tt.persistent
			e.start(environ...)
			if tt.persistent {
				stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
				e.runTask(protocol.Task{RequestID: "s0", ProjectID: "st", Prompt: "warm up"})
			}
			steps := []stubmodel.Step{{Text: stopText("unsteered"), DelayMS: 2500}, {Text: stopText("STEERED-ANSWER")}}
			if tt.inTurn {
				steps = []stubmodel.Step{{ToolUse: shellTool(tt.agent, `worker-wrapper progress --step "working"`), DelayMS: 2500},
					{Text: stopText("STEERED-ANSWER")}}
			}
			stub.SetScript(stubmodel.Script{Steps: steps, Fallback: &stubmodel.Step{Text: stopText("LATER-ANSWER")}})
			input := e.keys.Input(e.cfg.WorkerID)
			e.send(input, protocol.Task{RequestID: "s1", ProjectID: "st", Prompt: "FIRST-PROMPT do the thing"})
			modelAsked(t, stub, "FIRST-PROMPT")
			e.sendMessage(input, "s1", "STEER-MARKER use the staging database")
			o1 := e.outputOf("s1", 60*time.Second)
			if o1.Status != protocol.StatusComplete || !strings.Contains(o1.Response, "STEERED-ANSWER") {
				t.Fatalf("steered task: %+v", o1)
			}
			var steered *stubmodel.Request
			for _, r := range stub.Requests() {
				if strings.Contains(r.Text(), "STEER-MARKER") {
					r := r
					steered = &r
					break
				}
			}
			if steered == nil || !strings.Contains(steered.Text(), "FIRST-PROMPT") {
				t.Fatal("no model request carried the message in the task's session")
			}
			if tt.inTurn && (steered.Step != 1 || !strings.Contains(steered.Text(), "working")) {
				t.Fatalf("the message did not go into the running turn (it reached step %d)", steered.Step)
			}
			o2 := e.runTask(protocol.Task{RequestID: "s2", ProjectID: "st", Prompt: "next"})
			if o2.Status != protocol.StatusComplete || !strings.Contains(o2.Response, "LATER-ANSWER") || o2.SessionID != o1.SessionID {
				t.Fatalf("the next task got %+v", o2)
			}
			_, progress := e.docs(e.keys.Output(e.cfg.WorkerID))
			said := false
			for _, p := range progress {
				said = said || (p.RequestID == "s1" && strings.HasPrefix(p.Step, "message "))
			}
			if !said {
				t.Fatal("no progress event said what became of the message")
			}
		})
	}
}
