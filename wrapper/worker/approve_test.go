package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// permissionRequests decodes the permission requests on the worker's
// output stream.
func (e *env) permissionRequests() []protocol.PermissionRequest {
	msgs, _ := e.rc.XRange(context.Background(), e.keys.Output(e.cfg.WorkerID), "-", "+").Result()
	var out []protocol.PermissionRequest
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if _, typ, _ := protocol.PeekType(data); typ == protocol.TypePermissionRequest {
			p, err := protocol.DecodePermissionRequest(data)
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

// With AGENT_APPROVAL the real claude asks before each shell command that
// ALLOWED_COMMANDS does not allow: one allowed by the owner runs, one
// denied does not (the model reads why), one left unanswered is denied
// after APPROVAL_TIMEOUT.
func TestApprovalAllowsAndDenies(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	e.cfg.Persistent, e.cfg.Approval, e.cfg.ApprovalTimeout = true, true, 2*time.Second
	dir := t.TempDir()
	touch := func(name string) *stubmodel.ToolUse {
		return shellTool(protocol.AgentClaude, "touch "+filepath.Join(dir, name))
	}
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: touch("allowed")}, {ToolUse: touch("denied")}, {ToolUse: touch("unanswered")},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	e.start(environ...)
	input := e.keys.Input(e.cfg.WorkerID)
	e.send(input, protocol.Task{RequestID: "ap-1", Prompt: "make three files"})

	answer := func(n int, allow bool, msg string) protocol.PermissionRequest {
		var p protocol.PermissionRequest
		testkit.Eventually(t, "permission request", 60*time.Second, func() bool {
			ps := e.permissionRequests()
			if len(ps) >= n {
				p = ps[n-1]
			}
			return len(ps) >= n
		})
		if p.Tool != "Bash" || !strings.Contains(string(p.Input), "touch") || p.RequestID != "ap-1" {
			t.Fatalf("permission request %d: %+v", n, p)
		}
		if n < 3 {
			e.sendDoc(input)(protocol.NewPermissionReply("ap-1", p.PermissionID, allow, msg).Encode())
		}
		return p
	}
	answer(1, true, "")
	answer(2, false, "DENY-MARKER not that one")
	answer(3, false, "") // unanswered: the timeout denies it
	o := e.outputOf("ap-1", 60*time.Second)
	if o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	for name, want := range map[string]bool{"allowed": true, "denied": false, "unanswered": false} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("file %s exists: %v, want %v", name, err == nil, want)
		}
	}
	reqs := stub.Requests()
	if !strings.Contains(reqs[2].Text(), "DENY-MARKER") {
		t.Error("the model did not read the owner's reason for the denial")
	}
	_, progress := e.docs(e.keys.Output(e.cfg.WorkerID))
	var verdicts []string
	for _, p := range progress {
		if strings.HasPrefix(p.Step, "permission ") {
			verdicts = append(verdicts, p.Step)
		}
	}
	if len(verdicts) != 3 || !strings.HasSuffix(verdicts[0], "allowed") || !strings.Contains(verdicts[2], "no answer within 2s") {
		t.Fatalf("verdicts %q", verdicts)
	}
}
