package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

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

// With AGENT_APPROVAL the real claude, and a persistent Codex (its
// app-server), ask before each shell command that ALLOWED_COMMANDS does
// not allow: one allowed by the owner runs, one denied does not, one left
// unanswered is denied after APPROVAL_TIMEOUT. The model reads why
// (Claude: the owner's reason; Codex, which takes no reason: that the
// user rejected it).
func TestApprovalAllowsAndDenies(t *testing.T) {
	for _, tt := range []struct {
		agent  protocol.AgentType
		denial string // what the model reads of the denial
	}{
		{protocol.AgentClaude, "DENY-MARKER"},
		{protocol.AgentCodex, "rejected by user"},
	} {
		t.Run(string(tt.agent), func(t *testing.T) {
			t.Parallel()
			e := approvesAndDenies(t, tt.agent, tt.denial)
			if tt.agent == protocol.AgentCodex {
				e.ranInAppServer()
			}
		})
	}
}

func approvesAndDenies(t *testing.T, agentType protocol.AgentType, denial string) *env {
	e, stub, environ := realAgentEnv(t, agentType)
	e.cfg.Persistent, e.cfg.Approval, e.cfg.ApprovalTimeout = true, true, 2*time.Second
	dir := t.TempDir()
	touch := func(name string) *stubmodel.ToolUse {
		return shellTool(agentType, "touch "+filepath.Join(dir, name))
	}
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: touch("allowed")}, {ToolUse: touch("denied")}, {ToolUse: touch("unanswered")},
	}, Fallback: &stubmodel.Step{Text: finalText}})
	e.start(environ...)
	input := e.keys.Input(e.cfg.WorkerID)
	e.send(input, protocol.Task{RequestID: "ap-1", Prompt: "make three files"})

	answer := func(n int, name string, allow bool, msg string) {
		var p protocol.PermissionRequest
		testkit.Eventually(t, "permission request", 60*time.Second, func() bool {
			ps := e.permissionRequests()
			if len(ps) >= n {
				p = ps[n-1]
			}
			return len(ps) >= n
		})
		if p.Tool != "Bash" || gjson.GetBytes(p.Input, "command").String() != "touch "+filepath.Join(dir, name) || p.RequestID != "ap-1" {
			t.Fatalf("permission request %d: %+v (%s)", n, p, p.Input)
		}
		if n < 3 {
			e.sendDoc(input)(protocol.NewPermissionReply("ap-1", p.PermissionID, allow, msg).Encode())
		}
	}
	answer(1, "allowed", true, "")
	answer(2, "denied", false, "DENY-MARKER not that one")
	answer(3, "unanswered", false, "") // unanswered: the timeout denies it
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
	if len(reqs) != 4 || !strings.Contains(reqs[2].Text(), denial) {
		t.Errorf("%d model requests; the model did not read the denial (%q)", len(reqs), denial)
	}
	_, progress := e.docs(e.keys.Output(e.cfg.WorkerID))
	var verdicts []string
	for _, p := range progress {
		if strings.HasPrefix(p.Step, "permission ") {
			verdicts = append(verdicts, p.Step)
		}
	}
	if len(verdicts) != 3 || !strings.HasSuffix(verdicts[0], "allowed") || !strings.Contains(verdicts[1], "DENY-MARKER") ||
		!strings.Contains(verdicts[2], "no answer within 2s") {
		t.Fatalf("verdicts %q", verdicts)
	}
	return e
}
