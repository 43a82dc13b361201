package agent

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

func allowed(t *testing.T, s string) protocol.AllowedCommands {
	t.Helper()
	a, err := protocol.ParseAllowedCommandsEnv(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// parseAll feeds lines to c and returns their events.
func parseAll(c Parser, lines ...string) []Event {
	var evs []Event
	for _, l := range lines {
		evs = append(evs, c.ParseLine([]byte(l))...)
	}
	return evs
}

// written is what the events answer the agent, as JSON documents.
func written(evs []Event) []gjson.Result {
	var out []gjson.Result
	for _, ev := range evs {
		for _, l := range strings.Split(strings.TrimSpace(string(ev.Write)), "\n") {
			if l != "" {
				out = append(out, gjson.Parse(l))
			}
		}
	}
	return out
}

// The client opens a session (initialize, then session/new; session/load
// for a session to resume, or not found when the agent cannot load), and
// declares no fs or terminal capability.
func TestACPClientOpensSessions(t *testing.T) {
	c := NewACPClient(ACPSession{Cwd: "/ws", MCPServers: []protocol.MCPServer{{Name: "tm", Command: "/bin/tm", Env: map[string]string{"K": "v"}}}}, "")
	line, id := c.Open()
	init := gjson.ParseBytes(line)
	if init.Get("method").String() != "initialize" || init.Get("params.protocolVersion").Int() != 1 ||
		init.Get("params.clientCapabilities.terminal").Bool() || init.Get("params.clientCapabilities.fs.readTextFile").Bool() {
		t.Fatalf("initialize: %s", line)
	}
	w := written(parseAll(c, `{"jsonrpc":"2.0","id":"agentvisor-init","result":{"protocolVersion":1,"agentCapabilities":{"loadSession":true}}}`))
	if len(w) != 1 || w[0].Get("method").String() != "session/new" || w[0].Get("id").String() != id ||
		w[0].Get("params.cwd").String() != "/ws" || w[0].Get("params.mcpServers.0.env.0.name").String() != "K" {
		t.Fatalf("session/new: %v", w)
	}
	evs := parseAll(c, `{"jsonrpc":"2.0","id":"agentvisor-open","result":{"sessionId":"s1","models":{"currentModelId":"m1"}}}`)
	if len(evs) != 2 || evs[0].Init.SessionID != "s1" || evs[0].Init.Model != "m1" || evs[1].Control.Subtype != "success" {
		t.Fatalf("open: %+v", evs)
	}
	if p := gjson.ParseBytes(c.Message("hi", false)); p.Get("method").String() != "session/prompt" || p.Get("params.sessionId").String() != "s1" ||
		p.Get("params.prompt.0.text").String() != "hi" {
		t.Fatalf("prompt: %s", p.Raw)
	}
	if c.Message("steer", true) != nil {
		t.Fatal("a steering message went into the running turn")
	}

	r := NewACPClient(ACPSession{Cwd: "/ws"}, "s0")
	r.Open()
	w = written(parseAll(r, `{"jsonrpc":"2.0","id":"agentvisor-init","result":{"agentCapabilities":{"loadSession":true}}}`))
	if len(w) != 1 || w[0].Get("method").String() != "session/load" || w[0].Get("params.sessionId").String() != "s0" {
		t.Fatalf("session/load: %v", w)
	}
	evs = parseAll(r, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s0","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"old"}}}}`,
		`{"jsonrpc":"2.0","id":"agentvisor-open","result":null}`)
	if len(evs) != 2 || evs[0].Init.SessionID != "s0" {
		t.Fatalf("load: %+v", evs)
	}
	if evs := parseAll(r, `{"jsonrpc":"2.0","id":"agentvisor-prompt-1","result":{"stopReason":"end_turn"}}`); evs[0].Result.Text != "" {
		t.Fatalf("the loaded history counted as the turn's message: %+v", evs[0].Result)
	}

	n := NewACPClient(ACPSession{}, "s0")
	n.Open()
	evs = parseAll(n, `{"jsonrpc":"2.0","id":"agentvisor-init","result":{"agentCapabilities":{}}}`)
	if len(evs) != 1 || evs[0].Control == nil || !evs[0].Control.NotFound {
		t.Fatalf("no session/load: %+v", evs)
	}
}

// A turn: the result's text is the last message (after the last tool
// call), plans and running tool calls are progress notes, fs and terminal
// requests are refused, and a failed prompt is an error result.
func TestACPClientTurn(t *testing.T) {
	c := NewACPClient(ACPSession{}, "")
	parseAll(c, `{"jsonrpc":"2.0","id":"agentvisor-open","result":{"sessionId":"s1"}}`)
	up := func(u string) string {
		return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":` + u + `}}`
	}
	evs := parseAll(c,
		up(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Let me look."}}`),
		up(`{"sessionUpdate":"plan","entries":[{"content":"a","status":"completed"},{"content":"b","status":"in_progress"},{"content":"c","status":"pending"}]}`),
		up(`{"sessionUpdate":"tool_call","toolCallId":"t1","title":"bash","kind":"execute","status":"pending","rawInput":{}}`),
		up(`{"sessionUpdate":"tool_call_update","toolCallId":"t1","title":"go test ./...","status":"in_progress"}`),
		up(`{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed"}`),
		`{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"/etc/passwd"}}`,
		up(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done.\n"}}`),
		up(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"{\"status\": \"complete\"}"}}`),
		`{"jsonrpc":"2.0","id":"agentvisor-prompt-1","result":{"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":2,"cachedReadTokens":5}}}`)
	var notes []string
	var tools int
	var res *Result
	for _, ev := range evs {
		switch {
		case ev.Progress != nil:
			notes = append(notes, ev.Progress.Step)
		case ev.ToolCall != nil:
			tools++
		case ev.Result != nil:
			res = ev.Result
		}
	}
	if strings.Join(notes, "|") != "plan: [x] a; [>] b; [ ] c|tool: go test ./..." || tools != 1 {
		t.Fatalf("notes %q, %d tool calls", notes, tools)
	}
	if w := written(evs); len(w) != 1 || w[0].Get("id").Int() != 7 || w[0].Get("error.code").Int() != rpcMethodNotFound {
		t.Fatalf("fs request answered %v", w)
	}
	if res == nil || res.IsError || res.Text != "Done.\n{\"status\": \"complete\"}" || res.SessionID != "s1" || res.Usage.Input != 10 || res.Usage.CacheRead != 5 {
		t.Fatalf("result %+v", res)
	}
	evs = parseAll(c, `{"jsonrpc":"2.0","id":"agentvisor-prompt-2","error":{"code":-32603,"message":"Internal error","data":{"message":"status 401: invalid x-api-key"}}}`)
	if r := evs[0].Result; !r.IsError || r.APIErrorStatus != 401 || !strings.Contains(r.Text, "invalid x-api-key") {
		t.Fatalf("error result %+v", r)
	}
	evs = parseAll(c, `{"jsonrpc":"2.0","id":"agentvisor-prompt-3","result":{"stopReason":"cancelled"}}`)
	if r := evs[0].Result; !r.IsError || r.Subtype != "cancelled" {
		t.Fatalf("cancelled result %+v", r)
	}
}

// Qwen Code's turn: an empty message chunk after each model call (it
// carries the call's usage) starts no message; the progress call, named
// only in its permission request, is no "tool:" note; a message before a
// tool's update (its hook's refusal) is not part of the final one.
func TestACPClientQwenTurn(t *testing.T) {
	c := NewACPClient(ACPSession{Allowed: allowed(t, "*")}, "")
	parseAll(c, `{"jsonrpc":"2.0","id":"agentvisor-open","result":{"sessionId":"s1"}}`)
	up := func(u string) string {
		return `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":` + u + `}}`
	}
	usage := up(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":""},"_meta":{"usage":{"inputTokens":11100}}}`)
	evs := parseAll(c,
		up(`{"sessionUpdate":"tool_call","toolCallId":"c1","status":"pending","title":"Shell","kind":"execute","rawInput":{}}`),
		usage,
		`{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s1","options":[{"optionId":"proceed_once","kind":"allow_once"},{"optionId":"cancel","kind":"reject_once"}],`+
			`"toolCall":{"toolCallId":"c1","status":"pending","title":"worker-wrapper progress --step x","kind":"execute","rawInput":{"command":"worker-wrapper progress --step x"}}}}`,
		up(`{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed"}`),
		up(`{"sessionUpdate":"tool_call","toolCallId":"c2","status":"pending","title":"Shell","kind":"execute","rawInput":{}}`),
		usage,
		up(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"PreToolUse blocked: run_shell_command"}}`),
		up(`{"sessionUpdate":"tool_call_update","toolCallId":"c2","status":"failed","title":"Shell: rm -rf /","rawInput":{"command":"rm -rf /"}}`),
		up(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done."}}`),
		usage,
		`{"jsonrpc":"2.0","id":"agentvisor-prompt-1","result":{"stopReason":"end_turn"}}`)
	var notes []string
	var res *Result
	for _, ev := range evs {
		switch {
		case ev.Progress != nil:
			notes = append(notes, ev.Progress.Step)
		case ev.Result != nil:
			res = ev.Result
		}
	}
	if strings.Join(notes, "|") != "tool failed: Shell: rm -rf /" {
		t.Fatalf("notes %q", notes)
	}
	if w := written(evs); len(w) != 1 || w[0].Get("result.outcome.optionId").String() != "proceed_once" {
		t.Fatalf("permission answered %v", w)
	}
	if res == nil || res.Text != "Done." || res.Turns != 4 {
		t.Fatalf("result %+v: want the last message, two tool calls and two messages", res)
	}
}

func permissionLine(id int, command string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "session/request_permission", "params": map[string]any{
		"sessionId": "s1", "toolCall": map[string]any{"toolCallId": "t", "kind": "execute", "rawInput": map[string]any{"command": command}},
		"options": []any{map[string]any{"optionId": "ok", "kind": "allow_once"}, map[string]any{"optionId": "always", "kind": "allow_always"},
			map[string]any{"optionId": "no", "kind": "reject_once"}}}})
	return string(b)
}

// session/request_permission is decided by ALLOWED_COMMANDS: allowed,
// rejected and reported, or (AGENT_APPROVAL) asked of the owner, whose
// answer, or a cancel, goes back to the agent.
func TestACPClientPermissions(t *testing.T) {
	c := NewACPClient(ACPSession{Allowed: allowed(t, "git.status")}, "")
	w := written(c.ParseLine([]byte(permissionLine(1, "git status --short"))))
	if len(w) != 1 || w[0].Get("result.outcome.optionId").String() != "ok" {
		t.Fatalf("allowed: %v", w)
	}
	evs := c.ParseLine([]byte(permissionLine(2, "rm -rf /")))
	w = written(evs)
	if len(w) != 1 || w[0].Get("result.outcome.optionId").String() != "no" || evs[1].Denied == nil ||
		gjson.GetBytes(evs[1].Denied.Input, "command").String() != "rm -rf /" {
		t.Fatalf("refused: %v %+v", w, evs)
	}
	edit := `{"jsonrpc":"2.0","id":3,"method":"session/request_permission","params":{"sessionId":"s1","toolCall":{"toolCallId":"e","kind":"edit","rawInput":{"path":"a.go"}},"options":[{"optionId":"ok","kind":"allow_once"}]}}`
	if w := written(c.ParseLine([]byte(edit))); len(w) != 1 || w[0].Get("result.outcome.optionId").String() != "ok" {
		t.Fatalf("edit: %v", w)
	}

	a := NewACPClient(ACPSession{Allowed: allowed(t, "git.status"), Approval: true}, "")
	parseAll(a, `{"jsonrpc":"2.0","id":"agentvisor-open","result":{"sessionId":"s1"}}`)
	evs = a.ParseLine([]byte(permissionLine(4, "make deploy")))
	if len(evs) != 1 || evs[0].Permission == nil || evs[0].Permission.Tool != "Bash" || evs[0].Write != nil {
		t.Fatalf("approval: %+v", evs)
	}
	ans := gjson.ParseBytes(a.Answer(*evs[0].Permission, true, ""))
	if ans.Get("id").Int() != 4 || ans.Get("result.outcome.optionId").String() != "ok" {
		t.Fatalf("answer: %s", ans.Raw)
	}
	if a.Answer(*evs[0].Permission, false, "") != nil {
		t.Fatal("a permission answered twice")
	}
	evs = a.ParseLine([]byte(permissionLine(5, "make deploy")))
	var cancelled, cancel bool
	for _, l := range strings.Split(strings.TrimSpace(string(a.Interrupt())), "\n") {
		v := gjson.Parse(l)
		cancelled = cancelled || (v.Get("id").Int() == 5 && v.Get("result.outcome.outcome").String() == "cancelled")
		cancel = cancel || (v.Get("method").String() == "session/cancel" && v.Get("params.sessionId").String() == "s1")
	}
	if !cancelled || !cancel || a.Answer(*evs[0].Permission, true, "") != nil {
		t.Fatalf("interrupt: cancelled %v, session/cancel %v", cancelled, cancel)
	}
}

func fakeACPSpec(t *testing.T, s ACPSession, resumeID, prompt string) Spec {
	t.Helper()
	env := append(os.Environ(), "FAKEACP_STATE="+s.Cwd)
	return Spec{Argv: []string{fakeACP}, Env: env, Stdin: []byte(prompt), Timeout: 20 * time.Second,
		ResultGrace: 300 * time.Millisecond, DrainGrace: 300 * time.Millisecond, KillGrace: 300 * time.Millisecond,
		Converse: func() (Dialect, Parser) { c := NewACPClient(s, resumeID); return c, c }}
}

// Run drives a real ACP process (the fake agent) for one task: a result
// with the stop output, a session loaded by the next process, and a turn
// cancelled within a second by session/cancel.
func TestACPRunFakeAgent(t *testing.T) {
	s := ACPSession{Cwd: t.TempDir(), Allowed: allowed(t, "*")}
	o := Run(context.Background(), fakeACPSpec(t, s, "", "fake:plan\nfake:tool echo hi"))
	if o.Result == nil || o.Result.IsError || !strings.Contains(o.Result.Text, `"tool":"ran: hi"`) || o.Init == nil || o.Init.SessionID == "" {
		t.Fatalf("outcome %+v (result %+v) stderr %s", o, o.Result, o.Stderr)
	}
	sid := o.Init.SessionID
	o = Run(context.Background(), fakeACPSpec(t, s, sid, "fake:history"))
	if o.Result == nil || o.Result.SessionID != sid || !strings.Contains(o.Result.Text, "fake:plan") {
		t.Fatalf("resumed: %+v", o.Result)
	}
	o = Run(context.Background(), fakeACPSpec(t, s, "no-such-session", "hi"))
	if o.Result == nil || !o.Result.IsError || o.Result.Turns != 0 || !strings.Contains(o.Result.Text, "session not found") {
		t.Fatalf("missing session: %+v", o.Result)
	}

	interrupt := make(chan struct{})
	spec := fakeACPSpec(t, s, "", "fake:sleep 30")
	spec.Interrupt = interrupt
	time.AfterFunc(500*time.Millisecond, func() { close(interrupt) })
	start := time.Now()
	o = Run(context.Background(), spec)
	if !o.Interrupted || o.Result == nil || o.Result.Subtype != "cancelled" || time.Since(start) > 5*time.Second {
		t.Fatalf("cancel: interrupted %v, result %+v, after %v", o.Interrupted, o.Result, time.Since(start))
	}
}

// An interrupt while the agent opens its session (a slow boot) ends the
// run at once, interrupted, without waiting for the agent.
func TestACPInterruptWhileOpening(t *testing.T) {
	s := ACPSession{Cwd: t.TempDir()}
	spec := fakeACPSpec(t, s, "", "hi")
	spec.Argv = []string{"sh", "-c", "sleep 30"} // never answers initialize
	interrupt := make(chan struct{})
	spec.Interrupt = interrupt
	time.AfterFunc(300*time.Millisecond, func() { close(interrupt) })
	start := time.Now()
	o := Run(context.Background(), spec)
	if !o.Interrupted || o.Result != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("interrupted %v, result %+v, after %v", o.Interrupted, o.Result, time.Since(start))
	}
}
