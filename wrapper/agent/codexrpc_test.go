package agent

import (
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// codexLines are a captured transcript's lines.
func codexLines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/codex/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// The client opens a thread: initialize; on its answer initialized and
// thread/start (thread/resume of a thread to resume), with the workspace,
// an open sandbox and the approval policy ALLOWED_COMMANDS asks for. A
// thread Codex cannot resume is not found.
func TestCodexAppServerOpensThreads(t *testing.T) {
	for _, tt := range []struct {
		name, allowed, resume, method, policy string
	}{
		{"new thread under a list", "git.status", "", "thread/start", "untrusted"},
		{"new thread under *", "*", "", "thread/start", "never"},
		{"resumed thread", "git.status", "th-0", "thread/resume", "untrusted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCodexAppServer(CodexSession{Cwd: "/ws", Allowed: allowed(t, tt.allowed)}, tt.resume)
			line, id := c.Open()
			if init := gjson.ParseBytes(line); init.Get("method").String() != "initialize" || init.Get("params.clientInfo.name").String() != "agentvisor" {
				t.Fatalf("initialize: %s", line)
			}
			w := written(parseAll(c, `{"id":"agentvisor-init","result":{"userAgent":"agentvisor/0.171.0","codexHome":"/h/.codex"}}`))
			if len(w) != 2 || w[0].Get("method").String() != "initialized" || w[0].Get("id").Exists() {
				t.Fatalf("after initialize: %v", w)
			}
			open := w[1]
			if open.Get("method").String() != tt.method || open.Get("id").String() != id || open.Get("params.cwd").String() != "/ws" ||
				open.Get("params.sandbox").String() != "danger-full-access" || open.Get("params.approvalPolicy").String() != tt.policy ||
				open.Get("params.threadId").String() != tt.resume {
				t.Fatalf("open: %s", open.Raw)
			}
			evs := parseAll(c, `{"id":"agentvisor-open","result":{"thread":{"id":"th-1"},"model":"gpt-stub","modelProvider":"agentvisor"}}`)
			if len(evs) != 2 || evs[0].Init.SessionID != "th-1" || evs[0].Init.Model != "gpt-stub" || evs[1].Control.Subtype != "success" {
				t.Fatalf("opened: %+v", evs)
			}
			if m := gjson.ParseBytes(c.Message("hi", false)); m.Get("method").String() != "turn/start" || m.Get("params.threadId").String() != "th-1" ||
				m.Get("params.input.0.text").String() != "hi" || m.Get("params.input.0.type").String() != "text" {
				t.Fatalf("turn/start: %s", m.Raw)
			}
			if c.Message("steer", true) != nil {
				t.Fatal("a steering message went into the running turn")
			}
		})
	}

	r := NewCodexAppServer(CodexSession{Cwd: "/ws"}, "gone")
	parseAll(r, `{"id":"agentvisor-init","result":{}}`)
	evs := parseAll(r, `{"error":{"code":-32600,"message":"no rollout found for thread id gone"},"id":"agentvisor-open"}`)
	if len(evs) != 1 || evs[0].Control.Subtype != "error" || !evs[0].Control.NotFound || !strings.Contains(evs[0].Control.Error, "no rollout") {
		t.Fatalf("resume of a thread Codex lacks: %+v", evs)
	}
	n := NewCodexAppServer(CodexSession{Cwd: "/ws"}, "")
	parseAll(n, `{"id":"agentvisor-init","result":{}}`)
	evs = parseAll(n, `{"error":{"code":-32603,"message":"error creating thread: required MCP servers failed to initialize: tm"},"id":"agentvisor-open"}`)
	if len(evs) != 1 || evs[0].Control.Subtype != "error" || evs[0].Control.NotFound {
		t.Fatalf("a new thread refused: %+v", evs)
	}
}

// A captured turn of the real app-server: the approvals answered by
// ALLOWED_COMMANDS (the echo it allows accepted, the rm declined and
// reported), a tool call per command, one Turn per model call, and the
// result: the last agent message, the calls' usage, the thread.
func TestCodexAppServerCapturedTurn(t *testing.T) {
	c := NewCodexAppServer(CodexSession{Cwd: "/tmp/codexapp/ws", Allowed: allowed(t, "echo.*")}, "")
	c.Open()
	var evs []Event
	for _, l := range codexLines(t, "appserver_turn.jsonl") {
		if strings.Contains(l, `"id":"agentvisor-turn-1"`) {
			c.Message("run it", false)
		}
		evs = append(evs, c.ParseLine([]byte(l))...)
	}
	var calls, turns, denied, results int
	var decisions []string
	var r *Result
	for _, ev := range evs {
		switch {
		case ev.ToolCall != nil:
			calls++
		case ev.Turn != nil:
			turns++
			if ev.Turn.Usage != (protocol.Usage{Input: 2100, CacheRead: 9000, Output: 80}) {
				t.Errorf("a call's usage %+v", ev.Turn.Usage)
			}
		case ev.Denied != nil:
			denied++
			if ev.Denied.Tool != "Bash" || gjson.GetBytes(ev.Denied.Input, "command").String() != "rm -rf /tmp/codexapp/nothing" {
				t.Errorf("denial %+v (%s)", ev.Denied, ev.Denied.Input)
			}
		case ev.Result != nil:
			results++
			r = ev.Result
		case ev.Write != nil:
			if d := gjson.GetBytes(ev.Write, "result.decision"); d.Exists() {
				decisions = append(decisions, d.String())
			}
		}
	}
	if strings.Join(decisions, ",") != "accept,decline" || calls != 2 || turns != 3 || denied != 1 || results != 1 {
		t.Fatalf("decisions %q, %d tool calls, %d turns, %d denials, %d results", decisions, calls, turns, denied, results)
	}
	if r.IsError || r.Subtype != "completed" || !strings.Contains(r.Text, `"echoed": "hi-from-shell"`) || r.SessionID != "01a221f7-e1f4-7d33-bb7d-e4eeb04b24cd" ||
		r.Usage != (protocol.Usage{Input: 3 * 2100, CacheRead: 3 * 9000, Output: 3 * 80}) || r.Turns != 3 {
		t.Fatalf("result %+v", r)
	}
}

// A resumed thread repeats its last turn's usage before any turn: no part
// of the turn that follows.
func TestCodexAppServerCapturedResume(t *testing.T) {
	c := NewCodexAppServer(CodexSession{Cwd: "/tmp/codexapp/ws"}, "01a221f7-e1f4-7d33-bb7d-e4eeb04b24cd")
	c.Open()
	var turns int
	var r *Result
	for _, l := range codexLines(t, "appserver_resume.jsonl") {
		if strings.Contains(l, `"id":"agentvisor-turn-1"`) {
			c.Message("again", false)
		}
		for _, ev := range c.ParseLine([]byte(l)) {
			if ev.Turn != nil {
				turns++
			}
			if ev.Result != nil {
				r = ev.Result
			}
		}
	}
	if turns != 1 || r == nil || r.IsError || !strings.HasPrefix(r.Text, "Again.") || r.Usage.Input != 2100 || r.SessionID != "01a221f7-e1f4-7d33-bb7d-e4eeb04b24cd" {
		t.Fatalf("%d turns, result %+v", turns, r)
	}
}

// openedCodex is a client whose thread th-1 is open and whose turn tu-1
// runs.
func openedCodex(t *testing.T, s CodexSession) *CodexAppServer {
	t.Helper()
	c := NewCodexAppServer(s, "")
	c.Open()
	parseAll(c, `{"id":"agentvisor-init","result":{}}`, `{"id":"agentvisor-open","result":{"thread":{"id":"th-1"},"model":"m"}}`)
	c.Message("go", false)
	parseAll(c, `{"id":"agentvisor-turn-1","result":{"turn":{"id":"tu-1","status":"inProgress"}}}`)
	return c
}

// Interrupt is turn/interrupt of the turn in progress; one that comes
// before the turn's id goes when the id comes; the interrupted turn ends
// in an error result.
func TestCodexAppServerInterrupt(t *testing.T) {
	c := openedCodex(t, CodexSession{Cwd: "/ws", Allowed: allowed(t, "*")})
	in := gjson.ParseBytes(c.Interrupt())
	if in.Get("method").String() != "turn/interrupt" || in.Get("params.threadId").String() != "th-1" || in.Get("params.turnId").String() != "tu-1" {
		t.Fatalf("interrupt: %s", in.Raw)
	}
	evs := parseAll(c, `{"method":"turn/completed","params":{"threadId":"th-1","turn":{"id":"tu-1","status":"interrupted","error":null}}}`)
	if len(evs) != 1 || !evs[0].Result.IsError || evs[0].Result.Subtype != "interrupted" {
		t.Fatalf("interrupted turn: %+v", evs)
	}

	c.Message("next", false)
	if b := c.Interrupt(); b != nil {
		t.Fatalf("an interrupt before the turn's id: %s", b)
	}
	w := written(parseAll(c, `{"method":"turn/started","params":{"threadId":"th-1","turn":{"id":"tu-2","status":"inProgress"}}}`,
		`{"id":"agentvisor-turn-2","result":{"turn":{"id":"tu-2","status":"inProgress"}}}`))
	if len(w) != 1 || w[0].Get("method").String() != "turn/interrupt" || w[0].Get("params.turnId").String() != "tu-2" {
		t.Fatalf("the interrupt that waited for the turn: %v", w)
	}
}

// A failed turn is an error result with the API's status; an error Codex
// will retry is a retry; a plan is a progress note; a refused turn/start
// is an error result at once.
func TestCodexAppServerTurnErrors(t *testing.T) {
	c := openedCodex(t, CodexSession{Cwd: "/ws", Allowed: allowed(t, "*")})
	evs := parseAll(c,
		`{"method":"turn/plan/updated","params":{"threadId":"th-1","turnId":"tu-1","plan":[{"step":"read","status":"completed"},{"step":"fix","status":"inProgress"},{"step":"test","status":"pending"}]}}`,
		`{"method":"error","params":{"error":{"message":"Reconnecting... 2/5","codexErrorInfo":{"responseStreamDisconnected":{"httpStatusCode":401}},"additionalDetails":"unexpected status 401 Unauthorized: bad key"},"willRetry":true,"threadId":"th-1","turnId":"tu-1"}}`,
		`{"method":"error","params":{"error":{"message":"unexpected status 401 Unauthorized: bad key","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":401}}},"willRetry":false,"threadId":"th-1","turnId":"tu-1"}}`,
		`{"method":"turn/completed","params":{"threadId":"th-1","turn":{"id":"tu-1","status":"failed","error":{"message":"unexpected status 401 Unauthorized: bad key","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":401}}}}}}`)
	if len(evs) != 3 {
		t.Fatalf("events %+v", evs)
	}
	if evs[0].Progress == nil || evs[0].Progress.Step != "plan: [x] read; [>] fix; [ ] test" {
		t.Errorf("plan: %+v", evs[0])
	}
	if r := evs[1].Retry; r == nil || r.Attempt != 2 || r.MaxRetries != 5 || r.Status != 401 || !strings.Contains(r.Error, "bad key") {
		t.Errorf("retry: %+v", evs[1])
	}
	if r := evs[2].Result; r == nil || !r.IsError || r.APIErrorStatus != 401 || r.SessionID != "th-1" || !strings.Contains(r.Text, "401 Unauthorized") {
		t.Errorf("failed turn: %+v", evs[2].Result)
	}

	c.Message("again", false)
	evs = parseAll(c, `{"id":"agentvisor-turn-2","error":{"code":-32600,"message":"Invalid request"}}`)
	if len(evs) != 1 || !evs[0].Result.IsError || !strings.Contains(evs[0].Result.Text, "Invalid request") {
		t.Fatalf("refused turn: %+v", evs)
	}
}

// Codex's requests: a command by ALLOWED_COMMANDS on its shell script
// (accepted, declined and reported, or asked of the owner with
// AGENT_APPROVAL); file changes and MCP tool calls accepted; whatever
// else refused or declined.
func TestCodexAppServerRequests(t *testing.T) {
	approval := func(id, command string) string {
		return `{"method":"item/commandExecution/requestApproval","id":` + id + `,"params":{"kind":"command","threadId":"th-1","turnId":"tu-1","itemId":"i","command":` +
			command + `,"cwd":"/ws"}}`
	}
	for _, tt := range []struct {
		name     string
		approval bool
		line     string
		decision string // the answer written at once; "" for none
		denied   string // the command reported refused
		asked    string // the command asked of the owner
	}{
		{"allowed, single-quoted", false, approval("1", `"/bin/bash -c 'git status --short'"`), "accept", "", ""},
		{"allowed, double-quoted", false, approval("2", `"/bin/bash -lc \"git status 'x'\""`), "accept", "", ""},
		{"the progress call", false, approval("3", `"/bin/bash -c 'worker-wrapper progress --step \"Tests\" --pct 50'"`), "accept", "", ""},
		{"refused", false, approval("4", `"/bin/bash -c 'rm -rf /'"`), "decline", "rm -rf /", ""},
		{"refused: compound", false, approval("5", `"/bin/bash -c \"git status; rm x\""`), "decline", "git status; rm x", ""},
		{"refused: no shell of ours", false, approval("6", `"/usr/bin/python3 -c 'git status'"`), "decline", "/usr/bin/python3 -c 'git status'", ""},
		{"asked with approval", true, approval(`"a7"`, `"/bin/bash -c 'rm -rf /'"`), "", "", "rm -rf /"},
		{"no command: network", false, `{"method":"item/commandExecution/requestApproval","id":8,"params":{"kind":"command","threadId":"th-1","turnId":"tu-1","itemId":"i","networkApprovalContext":{"host":"x"}}}`, "accept", "", ""},
		{"file change", false, `{"method":"item/fileChange/requestApproval","id":9,"params":{"threadId":"th-1","turnId":"tu-1","itemId":"i"}}`, "accept", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := openedCodex(t, CodexSession{Cwd: "/ws", Allowed: allowed(t, "git.status"), Approval: tt.approval})
			evs := parseAll(c, tt.line)
			var decision, denied, asked string
			for _, ev := range evs {
				if ev.Write != nil {
					decision = gjson.GetBytes(ev.Write, "result.decision").String()
				}
				if ev.Denied != nil {
					denied = gjson.GetBytes(ev.Denied.Input, "command").String()
				}
				if ev.Permission != nil {
					asked = gjson.GetBytes(ev.Permission.Input, "command").String()
				}
			}
			if decision != tt.decision || denied != tt.denied || asked != tt.asked {
				t.Fatalf("decision %q, denied %q, asked %q: %+v", decision, denied, asked, evs)
			}
		})
	}

	// The owner's answers: accept, decline; none once the turn was
	// interrupted.
	c := openedCodex(t, CodexSession{Cwd: "/ws", Allowed: allowed(t, "git.status"), Approval: true})
	ask := func(id string) PermissionAsk {
		evs := parseAll(c, approval(id, `"/bin/bash -c 'touch x'"`))
		if len(evs) != 1 || evs[0].Permission == nil || evs[0].Permission.Tool != "Bash" {
			t.Fatalf("ask %s: %+v", id, evs)
		}
		return *evs[0].Permission
	}
	a, d := ask("11"), ask(`"12"`)
	if got := gjson.ParseBytes(c.Answer(a, true, "")); got.Get("id").Int() != 11 || got.Get("result.decision").String() != "accept" {
		t.Fatalf("allowed: %s", got.Raw)
	}
	if got := gjson.ParseBytes(c.Answer(d, false, "no")); got.Get("id").String() != "12" || got.Get("result.decision").String() != "decline" {
		t.Fatalf("denied: %s", got.Raw)
	}
	if c.Answer(a, true, "") != nil {
		t.Fatal("a second answer to one request")
	}
	late := ask("13")
	c.Interrupt()
	if c.Answer(late, true, "") != nil {
		t.Fatal("an answer after the interrupt")
	}

	// MCP tool calls, other elicitations, other requests.
	w := written(parseAll(c,
		`{"method":"mcpServer/elicitation/request","id":20,"params":{"threadId":"th-1","serverName":"tm","mode":"form","_meta":{"codex_approval_kind":"mcp_tool_call","tool_name":"echo"}}}`,
		`{"method":"mcpServer/elicitation/request","id":21,"params":{"threadId":"th-1","serverName":"tm","mode":"form","message":"your name?"}}`,
		`{"method":"item/tool/requestUserInput","id":22,"params":{"threadId":"th-1"}}`))
	if len(w) != 3 || w[0].Get("result.action").String() != "accept" || w[1].Get("result.action").String() != "decline" ||
		w[2].Get("error.code").Int() != rpcMethodNotFound || w[2].Get("id").Int() != 22 {
		t.Fatalf("answers %v", w)
	}
}

// codexScript takes out the script of a command Codex runs in a shell, as
// a POSIX shell reads its quotes; anything else is left as it is.
func TestCodexScript(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`/bin/bash -c 'echo hi'`, `echo hi`},
		{`/bin/bash -lc 'worker-wrapper progress --step "Running tests"'`, `worker-wrapper progress --step "Running tests"`},
		{`/bin/bash -c "worker-wrapper progress --step \"Running tests\" --pct 50; echo 'it'\"'\"'s'"`, `worker-wrapper progress --step "Running tests" --pct 50; echo 'it'"'"'s'`},
		{`bash -c 'a'\''b'`, `a'b`},
		{`/bin/sh -c "\$HOME \\ \` + "`" + `"`, `$HOME \ ` + "`"},
		{`zsh -lc ls`, `ls`},
		{`/bin/bash -c "$(rm x)"`, `/bin/bash -c "$(rm x)"`},
		{`/bin/bash -c 'a' extra`, `/bin/bash -c 'a' extra`},
		{`/bin/bash -x 'a'`, `/bin/bash -x 'a'`},
		{`/bin/bash -c 'unterminated`, `/bin/bash -c 'unterminated`},
		{`python3 -c 'print(1)'`, `python3 -c 'print(1)'`},
		{`git status`, `git status`},
		{`/bin/bash -c 'a'; rm x`, `/bin/bash -c 'a'; rm x`},
	} {
		if got := codexScript(tt.in); got != tt.want {
			t.Errorf("codexScript(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
