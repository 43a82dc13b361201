package worker

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
	"github.com/agentvisor/agentvisor/wrapper/agent"
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

// A prewarmed worker starts its agent process, ready (Claude initialized,
// Droid's new session open), before any task; the first task that wants
// a new session runs in it.
func TestPrewarmedAgentServesTheFirstTask(t *testing.T) {
	persistent := func(c agent.Capabilities) bool { return c.NoPersistent == "" }
	eachRealAgentThat(t, persistent, func(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
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
	})
}

// A persistent Droid (its JSON-RPC mode) serves a project's follow-up in
// the same process and session, its progress call going through the
// guard; a process that dies between tasks is replaced, the next one
// loading the session from its files (no vendor cloud); a task of another
// project gets a process of its own.
func TestPersistentDroid(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentDroid)
	e.cfg.Persistent = true
	e.start(environ...)
	o1, _ := e.followUpInOneProcess(stub, protocol.AgentDroid)
	pids := e.taskPIDs()
	reqs := stub.Requests()

	// The process group dies between tasks: the next task starts another
	// process, which loads the session, and completes in it.
	syscall.Kill(-pids[0], syscall.SIGKILL)
	o3 := e.runTask(protocol.Task{RequestID: "d3", ProjectID: "delta", Prompt: "third"})
	if o3.Status != protocol.StatusComplete || o3.SessionID != o1.SessionID || decision(o3) != "resume/continued" {
		t.Fatalf("after the process died: %s %+v (error %+v)", decision(o3), o3, o3.Error)
	}
	reqs = stub.Requests()
	if !strings.Contains(reqs[len(reqs)-1].Text(), "PERSIST-MARKER") {
		t.Fatal("the new process did not resume the session")
	}

	// Another project: another session, another process.
	o4 := e.runTask(protocol.Task{RequestID: "d4", ProjectID: "epsilon", Prompt: "OTHER-PROJECT"})
	if o4.Status != protocol.StatusComplete || o4.SessionID == o1.SessionID {
		t.Fatalf("another project: %s %+v", decision(o4), o4)
	}
	reqs = stub.Requests()
	if strings.Contains(reqs[len(reqs)-1].Text(), "PERSIST-MARKER") {
		t.Fatal("the other project's session carries the first one's turns")
	}
	// (The death may be seen only when the message is sent: the task then
	// starts twice, in the dead process and in a new one.)
	pids = e.taskPIDs()
	if n := len(pids); n < 4 || pids[n-2] == pids[0] || pids[n-1] == pids[n-2] {
		t.Fatalf("task pids %v: want a new process after the death and for the other project", pids)
	}
}

// followUpInOneProcess runs two tasks of a project in the persistent agent
// of e (started), the first with a progress call through the agent's
// shell tool: both complete in one process and session, each with its own
// calls' usage, and the follow-up's model request carries the first turn
// and the wrapper's system prompt section.
func (e *env) followUpInOneProcess(stub *stubmodel.Server, agentType protocol.AgentType) (o1, o2 protocol.Output) {
	t := e.t
	t.Helper()
	step := string(agentType) + " step"
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: shellTool(agentType, `worker-wrapper progress --step "`+step+`" --pct 50`)},
		{Text: finalText},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	o1 = e.runTask(protocol.Task{RequestID: "f1", ProjectID: "delta", Prompt: "PERSIST-MARKER first"})
	o2 = e.runTask(protocol.Task{RequestID: "f2", ProjectID: "delta", Prompt: "second"})
	if o1.Status != protocol.StatusComplete || o2.Status != protocol.StatusComplete || decision(o2) != "resume/continued" || o2.SessionID != o1.SessionID {
		t.Fatalf("outputs %s %+v (error %+v) / %s %+v (error %+v)", decision(o1), o1, o1.Error, decision(o2), o2, o2.Error)
	}
	if o1.Usage.Input != 2*o2.Usage.Input || o2.Usage.Input == 0 {
		t.Errorf("usage %+v / %+v: want each task's own calls", o1.Usage, o2.Usage)
	}
	_, prog := e.docs(e.keys.Output(e.cfg.WorkerID))
	if len(prog) != 1 || prog[0].Step != step || prog[0].RequestID != "f1" {
		t.Fatalf("progress through the %s shell tool: %+v", agentType, prog)
	}
	if pids := e.taskPIDs(); len(pids) != 2 || pids[0] != pids[1] {
		t.Fatalf("task pids %v: the follow-up did not reuse the process", pids)
	}
	reqs := stub.Requests()
	if last := reqs[len(reqs)-1]; !strings.Contains(last.Text(), "PERSIST-MARKER") || !strings.Contains(last.System, "worker-wrapper progress") {
		t.Fatal("the follow-up's request lacks the earlier turns or the wrapper's system prompt section")
	}
	return o1, o2
}
