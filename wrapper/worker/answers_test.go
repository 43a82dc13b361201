package worker

import (
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// A blocked task's question is answered by a task that names it: the
// answer continues the blocked task's session and project, although the
// project has moved to another session since, and its output links both.
func TestAnswerContinuesTheBlockedSession(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{Text: "I need to know.\n{\"status\": \"blocked\", \"question\": \"Which database?\"}"},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	b := e.runTask(protocol.Task{RequestID: "q-1", ProjectID: "shop", Prompt: "BLOCKED-MARKER migrate the data"})
	if b.Status != protocol.StatusBlocked || b.SessionID == "" {
		t.Fatalf("blocked task: %+v", b)
	}
	// The project's session moves on: a forced new session.
	other := e.runTask(protocol.Task{RequestID: "x-1", ProjectID: "shop", Prompt: "something else", ForceNewSession: true})
	if other.SessionID == b.SessionID {
		t.Fatal("the forced new session is the blocked one")
	}

	a := e.runTask(protocol.Task{RequestID: "a-1", Prompt: "Postgres.", Answers: "q-1"})
	if a.Status != protocol.StatusComplete || a.Answers != "q-1" || a.ProjectID != "shop" || a.SessionID != b.SessionID || decision(a) != "resume/answers" {
		t.Fatalf("answer: %s %+v (blocked session %s)", decision(a), a, b.SessionID)
	}
	reqs := stub.Requests()
	if last := reqs[len(reqs)-1].Text(); !strings.Contains(last, "BLOCKED-MARKER") || !strings.Contains(last, "Which database?") {
		t.Fatal("the answer's model request lacks the blocked task's turns")
	}

	// An answer to a run that does not exist, or of another project.
	if o := e.runTask(protocol.Task{RequestID: "a-2", Prompt: "yes", Answers: "nobody"}); o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeNotFound || o.Answers != "nobody" {
		t.Fatalf("answer to an unknown run: %+v (error %+v)", o, o.Error)
	}
	if o := e.runTask(protocol.Task{RequestID: "a-3", ProjectID: "blog", Prompt: "yes", Answers: "q-1"}); o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeInvalidTask {
		t.Fatalf("answer from another project: %+v (error %+v)", o, o.Error)
	}
}
