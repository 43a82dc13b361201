package agent

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// ACPClient is the wrapper's side of the Agent Client Protocol (ACP,
// protocol version 1: JSON-RPC 2.0, one message a line, on the agent's
// stdin and stdout): the Dialect of an ACP agent's process and the Parser
// of its output. One value serves one process and one session.
//
//   - Open sends initialize; its answer says whether the agent offers
//     session/load. The client then opens the session itself (an
//     Event.Write): session/load for a session to resume, session/new
//     otherwise. A session to resume that the agent cannot load (it
//     offers no session/load, or refuses it) gives ErrSessionNotFound,
//     and the session policy runs the task in a new session.
//   - A task is one session/prompt; its answer (stopReason) ends the
//     turn. The stop output is read from the agent's last message of the
//     turn (its agent_message_chunk updates since the last tool call).
//   - Interrupt is session/cancel: the agent ends the turn with
//     stopReason cancelled and the process stays. The permission requests
//     still waiting for their owner are answered cancelled, as the
//     protocol asks.
//   - A steering message cannot join a running prompt turn: ACP has no
//     such request. Message(steer) is nil, and the message is the
//     session's next prompt.
//   - session/request_permission: a shell command (kind execute, or a
//     rawInput with a command) is decided by ALLOWED_COMMANDS
//     (protocol.AllowedCommands.AllowsShell), every other tool call is
//     allowed (ALLOWED_COMMANDS governs shell commands, as for the other
//     agents). What the list refuses is asked of the task's owner with
//     AGENT_APPROVAL (Event.Permission, answered by Answer), else
//     rejected and reported (Event.Denied).
//   - fs/* and terminal/*: the client declares neither capability at
//     initialize and refuses such requests (-32601). The agent works with
//     its own tools inside the worker's container; serving them here would
//     make the wrapper a second execution path beside the agent's own,
//     outside the permission checks above.
//   - plan and tool_call updates become progress notes (Event.Progress).
type ACPClient struct {
	session  ACPSession
	resumeID string
	seq      atomic.Int64

	mu        sync.Mutex // guards the fields below: set by the reading goroutine, read by the task loop
	sessionID string
	prompted  bool              // a prompt went to this process
	asks      map[string]acpAsk // permission requests waiting for the owner, by request id (JSON)

	// The parser's state, owned by the goroutine that reads the output.
	opened    bool
	model     string
	message   strings.Builder // the agent's last message of the turn in progress
	inMessage bool            // the next chunk continues message
	turns     int             // messages and tool calls of the turn
	tools     map[string]*acpTool
}

// acpTool is a tool call of the turn: its latest title, and whether its
// start was noted as progress.
type acpTool struct {
	title   string
	command string // the shell command it runs, once an update named it
	noted   bool
	failed  bool
}

// ACPSession is what an ACP agent's session is opened with, and how its
// requests are answered.
type ACPSession struct {
	Cwd        string
	MCPServers []protocol.MCPServer
	Allowed    protocol.AllowedCommands
	Approval   bool // AGENT_APPROVAL: ask the task's owner about what Allowed refuses
	// Preamble goes before the first prompt of a new session: ACP has no
	// system prompt, so an agent configured no other way gets the
	// wrapper's section there.
	Preamble string
}

// acpAsk is a permission request's options: the ids that allow and
// reject it once.
type acpAsk struct{ allow, reject string }

// The ids of the client's requests say what each answer is.
const (
	acpProtocolVersion = 1
	acpInitID          = "agentvisor-init"
	acpOpenID          = "agentvisor-open"
	acpPromptID        = "agentvisor-prompt-"
	// acpMethodNotFound is JSON-RPC's "method not found".
	acpMethodNotFound = -32601
)

// NewACPClient returns the dialect and parser of one ACP agent process
// whose session is resumeID ("": a new one).
func NewACPClient(session ACPSession, resumeID string) *ACPClient {
	return &ACPClient{session: session, resumeID: resumeID, asks: map[string]acpAsk{}, tools: map[string]*acpTool{}}
}

var (
	_ Dialect = (*ACPClient)(nil)
	_ Parser  = (*ACPClient)(nil)
)

func acpRequest(id, method string, params any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return append(b, '\n')
}

func acpNotification(method string, params any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	return append(b, '\n')
}

// acpResult answers the agent's request id (raw JSON) with result.
func acpResult(id string, result any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "result": result})
	return append(b, '\n')
}

func acpError(id string, code int, message string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id),
		"error": map[string]any{"code": code, "message": message}})
	return append(b, '\n')
}

// Open implements Dialect: initialize, declaring no fs or terminal
// capability. The session is opened on its answer (ParseLine).
func (c *ACPClient) Open() ([]byte, string) {
	return acpRequest(acpInitID, "initialize", map[string]any{
		"protocolVersion": acpProtocolVersion,
		"clientCapabilities": map[string]any{
			"fs": map[string]any{"readTextFile": false, "writeTextFile": false}, "terminal": false},
		"clientInfo": map[string]any{"name": "agentvisor", "version": "1"},
	}), acpOpenID
}

// openSession is session/load of the session to resume, or session/new.
func (c *ACPClient) openSession() []byte {
	params := map[string]any{"cwd": c.session.Cwd, "mcpServers": acpMCPServers(c.session.MCPServers)}
	if c.resumeID != "" {
		params["sessionId"] = c.resumeID
		return acpRequest(acpOpenID, "session/load", params)
	}
	return acpRequest(acpOpenID, "session/new", params)
}

// acpMCPServers are the spec's MCP servers as ACP gives them to a
// session: stdio (command, args, env) or http (url, headers).
func acpMCPServers(servers []protocol.MCPServer) []any {
	out := make([]any, 0, len(servers))
	pairs := func(m map[string]string) []map[string]string {
		list := make([]map[string]string, 0, len(m))
		for k, v := range m {
			list = append(list, map[string]string{"name": k, "value": v})
		}
		return list
	}
	for _, s := range servers {
		if s.URL != "" {
			out = append(out, map[string]any{"type": "http", "name": s.Name, "url": s.URL, "headers": pairs(s.Headers)})
			continue
		}
		args := s.Args
		if args == nil {
			args = []string{}
		}
		out = append(out, map[string]any{"name": s.Name, "command": s.Command, "args": args, "env": pairs(s.Env)})
	}
	return out
}

// Message implements Dialect: a session/prompt. A steering message is nil:
// ACP has no way into a running turn.
func (c *ACPClient) Message(text string, steer bool) []byte {
	if steer {
		return nil
	}
	c.mu.Lock()
	sid, first := c.sessionID, !c.prompted && c.resumeID == ""
	c.prompted = true
	c.mu.Unlock()
	if first && c.session.Preamble != "" {
		text = c.session.Preamble + "\n\n" + text
	}
	id := acpPromptID + strconv.FormatInt(c.seq.Add(1), 10)
	return acpRequest(id, "session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": text}}})
}

// Interrupt implements Dialect: session/cancel, and the answer cancelled
// to every permission request still waiting.
func (c *ACPClient) Interrupt() []byte {
	c.mu.Lock()
	sid := c.sessionID
	var out []byte
	for id := range c.asks {
		out = append(out, acpResult(id, map[string]any{"outcome": map[string]any{"outcome": "cancelled"}})...)
	}
	clear(c.asks)
	c.mu.Unlock()
	return append(out, acpNotification("session/cancel", map[string]any{"sessionId": sid})...)
}

// Refuse implements Dialect: the client answers the agent's requests as
// it parses them (Event.Write).
func (c *ACPClient) Refuse(AgentRequest) []byte { return nil }

// Answer implements Dialect: the owner's answer to a permission request
// (AGENT_APPROVAL); nil when it is no longer waiting (the turn was
// cancelled).
func (c *ACPClient) Answer(ask PermissionAsk, allow bool, _ string) []byte {
	c.mu.Lock()
	a, ok := c.asks[ask.ID]
	delete(c.asks, ask.ID)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	if allow {
		return acpSelect(ask.ID, a.allow)
	}
	return acpSelect(ask.ID, a.reject)
}

// acpSelect answers a permission request with the option id, or
// cancelled when there is no such option.
func acpSelect(id, option string) []byte {
	if option == "" {
		return acpResult(id, map[string]any{"outcome": map[string]any{"outcome": "cancelled"}})
	}
	return acpResult(id, map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": option}})
}

// Echoes implements Dialect: ACP echoes no prompt.
func (c *ACPClient) Echoes() bool { return false }

// KillOnClose implements Dialect: an ACP agent keeps its session as it
// goes; it gets KillGrace to exit once its stdin closes.
func (c *ACPClient) KillOnClose() bool { return false }

// SessionID is the session the process opened ("" before).
func (c *ACPClient) SessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID
}

// ParseLine implements Parser.
func (c *ACPClient) ParseLine(line []byte) []Event {
	v, ok := jsonObject(line)
	if !ok || v.Get("jsonrpc").String() != "2.0" {
		return nil
	}
	method, id := v.Get("method").String(), v.Get("id")
	switch {
	case method != "" && id.Exists():
		return c.request(id.Raw, method, v.Get("params"))
	case method == "session/update":
		return c.update(v.Get("params.update"))
	case method == "" && id.Exists():
		return c.response(id.String(), v)
	}
	return nil
}

func (c *ACPClient) response(id string, v gjson.Result) []Event {
	e := v.Get("error")
	switch {
	case id == acpInitID && e.Exists():
		return acpOpenFailed(acpErrorText(e), false)
	case id == acpInitID:
		if c.resumeID != "" && !v.Get("result.agentCapabilities.loadSession").Bool() {
			return acpOpenFailed("the agent offers no session/load", true)
		}
		return []Event{{Write: c.openSession()}}
	case id == acpOpenID && e.Exists():
		return acpOpenFailed(acpErrorText(e), c.resumeID != "")
	case id == acpOpenID:
		return c.opensSession(v.Get("result"))
	case strings.HasPrefix(id, acpPromptID):
		return c.promptEnded(v)
	}
	return nil
}

func acpOpenFailed(msg string, notFound bool) []Event {
	return []Event{{Control: &ControlResponse{RequestID: acpOpenID, Subtype: "error", Error: msg, NotFound: notFound}}}
}

// opensSession takes the answer to session/new or session/load: the
// session is open, and what came before it (a loaded session's history)
// is no part of a turn.
func (c *ACPClient) opensSession(result gjson.Result) []Event {
	sid := result.Get("sessionId").String()
	if sid == "" {
		sid = c.resumeID // session/load answers without it
	}
	c.mu.Lock()
	c.sessionID = sid
	c.mu.Unlock()
	c.model = result.Get("models.currentModelId").String()
	result.Get("configOptions").ForEach(func(_, o gjson.Result) bool {
		if o.Get("category").String() == "model" {
			c.model = o.Get("currentValue").String()
		}
		return true
	})
	c.opened = true
	c.resetTurn()
	return []Event{
		{Init: &Init{SessionID: sid, Model: c.model}},
		{Control: &ControlResponse{RequestID: acpOpenID, Subtype: "success"}},
	}
}

func (c *ACPClient) resetTurn() {
	c.message.Reset()
	c.inMessage, c.turns = false, 0
	clear(c.tools)
}

// acpStatus finds an HTTP status in an agent's error text.
var acpStatus = regexp.MustCompile(`(?i)\b(?:status(?: code)?|http)[ :=]*(\d{3})\b`)

// promptEnded is the answer to a session/prompt: the turn's result.
func (c *ACPClient) promptEnded(v gjson.Result) []Event {
	defer c.resetTurn()
	sid := c.SessionID()
	if e := v.Get("error"); e.Exists() {
		msg := acpErrorText(e)
		return []Event{{Result: &Result{Text: msg, IsError: true, Subtype: "error", APIErrorStatus: acpErrorStatus(msg),
			SessionID: sid, Turns: c.turns}}}
	}
	u := v.Get("result.usage")
	r := &Result{Text: c.message.String(), Subtype: v.Get("result.stopReason").String(), SessionID: sid, Turns: c.turns,
		Usage: protocol.Usage{Input: tokens(u.Get("inputTokens")), Output: tokens(u.Get("outputTokens")),
			CacheRead: tokens(u.Get("cachedReadTokens")), CacheCreation: tokens(u.Get("cachedWriteTokens"))}}
	if r.Subtype != "end_turn" {
		r.IsError = true
		if strings.TrimSpace(r.Text) == "" {
			r.Text = "the turn ended: " + r.Subtype
		}
	}
	return []Event{{Result: r}}
}

func acpErrorStatus(msg string) int {
	if m := acpStatus.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return errorStatus(msg)
}

// acpErrorText is a JSON-RPC error's message, with its data when any.
func acpErrorText(e gjson.Result) string {
	msg := e.Get("message").String()
	if d := e.Get("data"); d.Exists() {
		s := d.String()
		if d.IsObject() {
			if m := d.Get("message").String(); m != "" {
				s = m
			}
		}
		if s != "" && s != msg {
			msg += ": " + s
		}
	}
	if msg == "" {
		msg = "error " + e.Get("code").String()
	}
	return msg
}

// update is one session/update notification of the turn in progress.
func (c *ACPClient) update(u gjson.Result) []Event {
	if !c.opened { // a loaded session's history
		return nil
	}
	switch u.Get("sessionUpdate").String() {
	case "agent_message_chunk":
		text := u.Get("content.text").String()
		if u.Get("content.type").String() != "text" || text == "" {
			return nil // no text: Qwen Code's carrier of a model call's usage (_meta), which starts no message
		}
		if !c.inMessage {
			c.message.Reset()
			c.inMessage = true
			c.turns++
		}
		c.message.WriteString(text)
	case "tool_call":
		c.inMessage = false
		c.turns++
		id := u.Get("toolCallId").String()
		c.tools[id] = &acpTool{title: u.Get("title").String()}
		return append([]Event{{ToolCall: &ToolCall{Name: acpToolName(u), Input: rawOr(u.Get("rawInput").Raw)}}}, c.toolNote(id, u)...)
	case "tool_call_update":
		c.inMessage = false // the message after a tool's update is a new one
		return c.toolNote(u.Get("toolCallId").String(), u)
	case "plan":
		return []Event{{Progress: &ProgressNote{Step: cutText(acpPlan(u.Get("entries")), 1024)}}}
	}
	return nil
}

// toolNote notes a tool call as progress once it runs (an agent may
// announce it pending, before its input and title are known: OpenCode's
// title is then the tool's name, and later its command), and again if it
// fails; never the progress call, which is a progress event of its own.
func (c *ACPClient) toolNote(id string, u gjson.Result) []Event {
	t := c.tool(id, u)
	if isProgressCall(t.command) || isProgressCall(t.title) {
		return nil // the progress call is its own progress event
	}
	switch status := u.Get("status").String(); {
	case status == "failed" && !t.failed:
		t.failed = true
		return []Event{{Progress: &ProgressNote{Step: cutText("tool failed: "+t.title, 1024), Level: protocol.LevelWarning}}}
	case status != "pending" && status != "" && !t.noted:
		t.noted = true
		return []Event{{Progress: &ProgressNote{Step: cutText("tool: "+t.title, 1024)}}}
	}
	return nil
}

// tool is the tool call id of the turn, its title and command updated
// from u (a tool_call or tool_call_update, or a permission request's
// toolCall: Qwen Code names the command only there or in a later update).
func (c *ACPClient) tool(id string, u gjson.Result) *acpTool {
	t := c.tools[id]
	if t == nil {
		t = &acpTool{}
		c.tools[id] = t
	}
	if title := u.Get("title").String(); title != "" {
		t.title = title
	}
	if cmd, _ := acpShellCommand(u); cmd != "" {
		t.command = cmd
	}
	return t
}

// isProgressCall reports whether a shell command is the runtime's own
// progress call.
func isProgressCall(command string) bool {
	return strings.HasPrefix(strings.TrimSpace(command), "worker-wrapper progress")
}

// acpToolName names an ACP tool call as the other agents' are named: a
// shell command Bash, anything else by its kind (read, edit, ...).
func acpToolName(u gjson.Result) string {
	kind := u.Get("kind").String()
	if kind == "execute" {
		return "Bash"
	}
	if kind == "" {
		return "other"
	}
	return kind
}

// acpPlan is a plan update as one line: "plan: [x] a; [>] b; [ ] c".
func acpPlan(entries gjson.Result) string {
	var parts []string
	entries.ForEach(func(_, e gjson.Result) bool {
		mark := "[ ]"
		switch e.Get("status").String() {
		case "completed":
			mark = "[x]"
		case "in_progress":
			mark = "[>]"
		}
		parts = append(parts, mark+" "+e.Get("content").String())
		return true
	})
	return "plan: " + strings.Join(parts, "; ")
}

func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// request answers a request of the agent: a permission is decided here;
// every other method (fs/*, terminal/*) is refused.
func (c *ACPClient) request(id, method string, params gjson.Result) []Event {
	if method == "session/request_permission" {
		return c.permission(id, params)
	}
	return []Event{{Write: acpError(id, acpMethodNotFound,
		"agentvisor serves no "+method+": the agent works with its own tools inside the worker's container")}}
}

// permission decides a session/request_permission: see ACPClient.
func (c *ACPClient) permission(id string, params gjson.Result) []Event {
	var a acpAsk
	params.Get("options").ForEach(func(_, o gjson.Result) bool {
		switch o.Get("kind").String() {
		case "allow_once":
			a.allow = o.Get("optionId").String()
		case "allow_always":
			if a.allow == "" {
				a.allow = o.Get("optionId").String()
			}
		case "reject_once":
			a.reject = o.Get("optionId").String()
		case "reject_always":
			if a.reject == "" {
				a.reject = o.Get("optionId").String()
			}
		}
		return true
	})
	tc := params.Get("toolCall")
	c.tool(tc.Get("toolCallId").String(), tc)
	command, shell := acpShellCommand(tc)
	if !shell || c.session.Allowed.AllowsShell(command) {
		return []Event{{Write: acpSelect(id, a.allow)}}
	}
	input, _ := json.Marshal(map[string]string{"command": command})
	if c.session.Approval {
		c.mu.Lock()
		c.asks[id] = a
		c.mu.Unlock()
		return []Event{{Permission: &PermissionAsk{ID: id, Tool: "Bash", Input: input}}}
	}
	return []Event{{Write: acpSelect(id, a.reject)}, {Denied: &Denial{Tool: "Bash", Input: input}}}
}

// acpShellCommand is the shell command a tool call runs: its rawInput's
// command (a string, or an argv whose shell -c script is the command),
// for a call of kind execute or one whose input has a command. shell is
// false for any other tool call; an execute call with no command found
// has command "", which no list allows but "*".
func acpShellCommand(tc gjson.Result) (command string, shell bool) {
	cmd := tc.Get("rawInput.command")
	if !cmd.Exists() {
		cmd = tc.Get("rawInput.cmd")
	}
	if tc.Get("kind").String() != "execute" && !cmd.Exists() {
		return "", false
	}
	if cmd.IsArray() {
		var argv []string
		cmd.ForEach(func(_, w gjson.Result) bool { argv = append(argv, w.String()); return true })
		if len(argv) == 3 && (argv[1] == "-c" || argv[1] == "-lc") {
			return argv[2], true
		}
		return strings.Join(argv, " "), true
	}
	return cmd.String(), true
}
