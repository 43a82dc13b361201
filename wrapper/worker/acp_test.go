package worker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// These tests run the wrapper's ACP adapter (AGENT_TYPE=acp) against the
// fake ACP agent (internal/fakeacp): a real process speaking ACP on its
// stdio; realacp_test.go runs the real OpenCode and Qwen Code.

// acpEnv is a worker of the fake ACP agent, whose sessions live in a
// directory of the test's; environ is what start needs.
func acpEnv(t *testing.T, persistent bool) (e *env, environ []string) {
	e = newEnv(t, protocol.AgentACP, protocol.KindLongLived)
	e.cfg.Persistent = persistent
	return e, []string{"FAKEACP_STATE=" + t.TempDir()}
}

// acpResult is what the fake agent's stop output says.
type acpResult struct {
	Prompts int      `json:"prompts"`
	Tool    string   `json:"tool"`
	History []string `json:"history"`
	FSError bool     `json:"fs_error"`
	FSCaps  string   `json:"fs_caps"`
}

func fakeResult(t *testing.T, o protocol.Output) acpResult {
	t.Helper()
	var r acpResult
	if o.Status != protocol.StatusComplete || json.Unmarshal(o.Result, &r) != nil {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	return r
}

func progressSteps(ps []protocol.Progress, requestID string) []string {
	var steps []string
	for _, p := range ps {
		if p.RequestID == requestID {
			steps = append(steps, p.Step)
		}
	}
	return steps
}

// A task of an ACP agent, in a process of its own and in the persistent
// process: its stop output read from the final message; its plan, its
// tool call and its progress call as progress events (the progress call
// not twice); a shell command
// ALLOWED_COMMANDS allows runs, one it does not is rejected and reported;
// the client's fs method is refused (no capability declared); the next
// task of the project continues the session (session/load in a new
// process, the same process when persistent).
func TestACPTasks(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(map[bool]string{false: "per-task", true: "persistent"}[persistent], func(t *testing.T) {
			t.Parallel()
			e, environ := acpEnv(t, persistent)
			var err error
			if e.cfg.AllowedCommands, err = protocol.ParseAllowedCommandsEnv("worker.progress,echo.*"); err != nil {
				t.Fatal(err)
			}
			e.start(environ...)
			o1 := e.runTask(protocol.Task{RequestID: "a1", ProjectID: "p",
				Prompt: "fake:plan\nfake:tool echo hi\nfake:tool worker-wrapper progress --step Testing --pct 50\nfake:fs"})
			r1 := fakeResult(t, o1)
			if !strings.HasPrefix(r1.Tool, "ran:") || !r1.FSError || !strings.Contains(r1.FSCaps, `"terminal":false`) || o1.SessionID == "" {
				t.Fatalf("first task: %+v, session %q", r1, o1.SessionID)
			}
			_, prog := e.docs(e.keys.Output(e.cfg.WorkerID))
			steps := strings.Join(progressSteps(prog, "a1"), "|")
			for _, want := range []string{"plan: [x] read the code; [>] fix the bug", "tool: echo hi", "Testing"} {
				if !strings.Contains(steps, want) {
					t.Errorf("progress %q lacks %q", steps, want)
				}
			}
			if strings.Contains(steps, "tool: worker-wrapper") {
				t.Errorf("the progress call was noted as a tool call too: %q", steps)
			}

			o2 := e.runTask(protocol.Task{RequestID: "a2", ProjectID: "p", Prompt: "fake:tool rm -rf /tmp/nothing\nfake:history"})
			r2 := fakeResult(t, o2)
			if r2.Tool != "rejected" || o2.SessionID != o1.SessionID || decision(o2) != "resume/continued" ||
				len(r2.History) != 1 || !strings.Contains(r2.History[0], "fake:plan") {
				t.Fatalf("second task: %+v, %s, session %q (first %q)", r2, decision(o2), o2.SessionID, o1.SessionID)
			}
			_, prog = e.docs(e.keys.Output(e.cfg.WorkerID))
			refused := false
			for _, p := range prog {
				refused = refused || (p.RequestID == "a2" && p.Refused != nil && p.Refused.Command == "rm -rf /tmp/nothing")
			}
			if !refused {
				t.Errorf("the refused command was not reported: %+v", prog)
			}
			if pids := e.taskPIDs(); persistent && (len(pids) != 2 || pids[0] != pids[1]) {
				t.Errorf("persistent: the tasks ran in processes %v", pids)
			}
		})
	}
}

// A cancel of a running ACP task is session/cancel: the output comes
// long before the command would end, CANCELLED, and the next task continues the session (in the
// same process when persistent).
func TestACPCancel(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(map[bool]string{false: "per-task", true: "persistent"}[persistent], func(t *testing.T) {
			t.Parallel()
			e, environ := acpEnv(t, persistent)
			e.start(environ...)
			o0 := e.runTask(protocol.Task{RequestID: "c0", ProjectID: "p", Prompt: "warm up"})
			fakeResult(t, o0)
			input := e.keys.Input(e.cfg.WorkerID)
			e.send(input, protocol.Task{RequestID: "c1", ProjectID: "p", Prompt: "fake:sleep 30"})
			testkit.Eventually(t, "the task running", 10*time.Second, func() bool { return len(e.taskPIDs()) >= 2 })
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			e.sendCancel(input, "c1", "not needed")
			o1 := e.outputOf("c1", 10*time.Second)
			if took := time.Since(start); o1.Status != protocol.StatusCancelled || took > cancelEndsIt {
				t.Fatalf("cancel: %+v (error %+v) after %v", o1, o1.Error, took)
			}
			o2 := e.runTask(protocol.Task{RequestID: "c2", ProjectID: "p", Prompt: "fake:history"})
			if r := fakeResult(t, o2); o2.SessionID != o0.SessionID || len(r.History) != 2 {
				t.Fatalf("after the cancel: %+v, session %q (was %q)", r, o2.SessionID, o0.SessionID)
			}
			if pids := e.taskPIDs(); persistent && pids[len(pids)-1] != pids[0] {
				t.Errorf("persistent: the process did not outlive the cancel: %v", pids)
			}
		})
	}
}

// With AGENT_APPROVAL an ACP agent's permission request for a command
// ALLOWED_COMMANDS does not allow goes to the task's owner: allowed, it
// runs; denied, the agent is told no. No persistent process is needed:
// a task's own process has its control channel.
func TestACPApproval(t *testing.T) {
	e, environ := acpEnv(t, false)
	e.cfg.Approval, e.cfg.ApprovalTimeout = true, 30*time.Second
	e.start(environ...)
	input := e.keys.Input(e.cfg.WorkerID)
	dir := t.TempDir()
	for i, allow := range []bool{true, false} {
		name := filepath.Join(dir, map[bool]string{true: "yes", false: "no"}[allow])
		reqID := map[bool]string{true: "ap-yes", false: "ap-no"}[allow]
		e.send(input, protocol.Task{RequestID: reqID, Prompt: "fake:tool touch " + name})
		var p protocol.PermissionRequest
		testkit.Eventually(t, "permission request", 10*time.Second, func() bool {
			ps := e.permissionRequests()
			if len(ps) > i {
				p = ps[i]
			}
			return len(ps) > i
		})
		if p.Tool != "Bash" || p.RequestID != reqID || !strings.Contains(string(p.Input), "touch") {
			t.Fatalf("permission request: %+v", p)
		}
		e.sendDoc(input)(protocol.NewPermissionReply(reqID, p.PermissionID, allow, "").Encode())
		r := fakeResult(t, e.outputOf(reqID, 10*time.Second))
		_, err := os.Stat(name)
		if want := map[bool]string{true: "ran: ", false: "rejected"}[allow]; r.Tool != want || (err == nil) != allow {
			t.Fatalf("allow %v: tool %q, file exists %v", allow, r.Tool, err == nil)
		}
	}
}

// AGENT_TYPE=acp needs AGENT_COMMAND, which no other agent takes, and no
// pty (its stdio carries the protocol).
func TestACPConfig(t *testing.T) {
	base := map[string]string{"WORKER_ID": "w", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "acp"}
	for _, tt := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{}, "AGENT_COMMAND"},
		{map[string]string{"AGENT_COMMAND": "gemini --experimental-acp", "AGENT_PTY": "true"}, "AGENT_PTY"},
		{map[string]string{"AGENT_TYPE": "claude", "AGENT_COMMAND": "x"}, "AGENT_COMMAND"},
	} {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range tt.set {
			env[k] = v
		}
		if _, err := FromEnv(mapEnv(env)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want one about %s", tt.set, err, tt.want)
		}
	}
	c, err := FromEnv(mapEnv(map[string]string{"WORKER_ID": "w", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "acp",
		"AGENT_COMMAND": `["gemini", "--experimental-acp"]`, "AGENT_APPROVAL": "true"}))
	if err != nil || strings.Join(c.AgentCommand, " ") != "gemini --experimental-acp" {
		t.Fatalf("config %+v, err %v", c.AgentCommand, err)
	}
}

// A steering message for a running ACP task cannot join its turn (ACP has
// no such request): it is the session's next prompt, run right after the
// turn, part of the same task, whose output is that last turn's.
func TestACPSteer(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(map[bool]string{false: "per-task", true: "persistent"}[persistent], func(t *testing.T) {
			t.Parallel()
			e, environ := acpEnv(t, persistent)
			e.start(environ...)
			input := e.keys.Input(e.cfg.WorkerID)
			e.send(input, protocol.Task{RequestID: "s1", ProjectID: "p", Prompt: "fake:sleep 1"})
			testkit.Eventually(t, "the task running", 10*time.Second, func() bool { return len(e.taskPIDs()) >= 1 })
			e.sendMessage(input, "s1", "fake:history")
			r := fakeResult(t, e.outputOf("s1", 15*time.Second))
			// The first prompt of a new session carries the wrapper's
			// section: ACP has no system prompt.
			if r.Prompts != 2 || len(r.History) != 1 || !strings.HasPrefix(r.History[0], "# Working as an autonomous worker") ||
				!strings.HasSuffix(r.History[0], "\n\nfake:sleep 1") {
				t.Fatalf("the steered task's result %+v: want the message as the session's second prompt", r)
			}
			_, prog := e.docs(e.keys.Output(e.cfg.WorkerID))
			if steps := strings.Join(progressSteps(prog, "s1"), "|"); !strings.Contains(steps, "message queued for the task's next turn") {
				t.Errorf("progress %q", steps)
			}
		})
	}
}

// An ACP agent that offers no session/load: the project's next task
// cannot continue the session, and runs in a new one (the session
// policy's fallback of a failed resume), complete.
func TestACPWithoutLoadSession(t *testing.T) {
	e, environ := acpEnv(t, false)
	e.start(append(environ, "FAKEACP_NO_LOAD=1")...)
	o1 := e.runTask(protocol.Task{RequestID: "n1", ProjectID: "p", Prompt: "first"})
	fakeResult(t, o1)
	o2 := e.runTask(protocol.Task{RequestID: "n2", ProjectID: "p", Prompt: "fake:history"})
	if r := fakeResult(t, o2); o2.SessionID == o1.SessionID || len(r.History) != 0 || o2.Session == nil || o2.Session.Action != "new" {
		t.Fatalf("second task: %+v, %s, session %q (first %q)", r, decision(o2), o2.SessionID, o1.SessionID)
	}
	t.Logf("decision %s, resume error %q", decision(o2), o2.Session.ResumeError)
}
