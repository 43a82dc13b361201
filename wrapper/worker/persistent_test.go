package worker

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/protocol/testkit"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// taskPIDs returns the agent pid of every task_started event, in order.
func (e *env) taskPIDs() []int {
	var pids []int
	for _, l := range e.lifecycleEvents() {
		if l.Event == protocol.EventTaskStarted {
			pids = append(pids, int(l.Detail["pid"].(float64)))
		}
	}
	return pids
}

func TestPersistentClaude(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	e.cfg.Persistent = true
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})

	o1 := e.runTask(protocol.Task{RequestID: "p1", ProjectID: "delta", Prompt: "PERSIST-MARKER first"})
	o2 := e.runTask(protocol.Task{RequestID: "p2", ProjectID: "delta", Prompt: "second"})
	if o1.Status != protocol.StatusComplete || o2.Status != protocol.StatusComplete || decision(o2) != "resume/continued" || o2.SessionID != o1.SessionID {
		t.Fatalf("outputs %s %+v / %s %+v", decision(o1), o1, decision(o2), o2)
	}
	pids := e.taskPIDs()
	if len(pids) != 2 || pids[0] != pids[1] {
		t.Fatalf("task pids %v: the follow-up did not reuse the process", pids)
	}
	reqs := stub.Requests()
	if !strings.Contains(reqs[len(reqs)-1].Text(), "PERSIST-MARKER") {
		t.Fatal("the follow-up's request lacks the earlier turns")
	}

	// The process dies between tasks (its leader only: what is left of it
	// answers the next message with an error), then the whole group: each
	// time the next task starts another process, resuming the session, and
	// completes.
	syscall.Kill(pids[0], syscall.SIGKILL)
	// (A process killed right after its result may leave its session file
	// unfinished: then the resume fails, and the task runs in a new
	// session. Either way it completes.)
	o3 := e.runTask(protocol.Task{RequestID: "p3", ProjectID: "delta", Prompt: "third"})
	if o3.Status != protocol.StatusComplete || (o3.SessionID != o1.SessionID && decision(o3) != "new/resume_failed") {
		t.Fatalf("after the process died: %s %+v (error %+v)", decision(o3), o3, o3.Error)
	}
	syscall.Kill(-e.taskPIDs()[2], syscall.SIGKILL)
	o4 := e.runTask(protocol.Task{RequestID: "p4", ProjectID: "delta", Prompt: "fourth"})
	if o4.Status != protocol.StatusComplete || (o4.SessionID != o3.SessionID && decision(o4) != "new/resume_failed") {
		t.Fatalf("after the group died: %s %+v (error %+v)", decision(o4), o4, o4.Error)
	}
	pids = e.taskPIDs()
	if len(pids) < 4 || pids[len(pids)-1] == pids[0] {
		t.Fatalf("task pids %v: want a new process after each death", pids)
	}
}

// A prewarmed worker starts its Claude process, initialized, before any
// task; the first task that wants a new session runs in it.
func TestPrewarmedClaudeServesTheFirstTask(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	e.cfg.Persistent, e.cfg.Prewarm = true, true
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
	pid := 0
	testkit.Eventually(t, "the agent started ahead", 30*time.Second, func() bool {
		for _, l := range e.lifecycleEvents() {
			if p, ok := l.Detail["agent_pid"].(float64); ok && l.Event == protocol.EventStarted {
				pid = int(p)
			}
		}
		return pid > 0
	})
	if n := len(stub.Requests()); n != 0 {
		t.Fatalf("%d model calls before any task: starting ahead must cost no tokens", n)
	}
	o := e.runTask(protocol.Task{RequestID: "w1", ProjectID: "fresh", Prompt: "first"})
	if o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v", o)
	}
	if pids := e.taskPIDs(); len(pids) != 1 || pids[0] != pid {
		t.Fatalf("task pids %v, want the process started ahead (%d)", pids, pid)
	}
}
