package agent

import (
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

	asks pendingAsks[acpAsk] // permission requests waiting for the owner

	mu        sync.Mutex // guards the fields below: set by the reading goroutine, read by the task loop
	sessionID string
	prompted  bool // a prompt went to this process

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
	acpPromptID        = "agentvisor-prompt-"
)

// NewACPClient returns the dialect and parser of one ACP agent process
// whose session is resumeID ("": a new one).
func NewACPClient(session ACPSession, resumeID string) *ACPClient {
	return &ACPClient{session: session, resumeID: resumeID, tools: map[string]*acpTool{}}
}

var (
	_ Dialect = (*ACPClient)(nil)
	_ Parser  = (*ACPClient)(nil)
)

// Open implements Dialect: initialize, declaring no fs or terminal
// capability. The session is opened on its answer (ParseLine).
func (c *ACPClient) Open() ([]byte, string) {
	return rpcRequest(rpcInitID, "initialize", map[string]any{
		"protocolVersion": acpProtocolVersion,
		"clientCapabilities": map[string]any{
			"fs": map[string]any{"readTextFile": false, "writeTextFile": false}, "terminal": false},
		"clientInfo": map[string]any{"name": "agentvisor", "version": "1"},
	}), rpcOpenID
}

// openSession is session/load of the session to resume, or session/new.
func (c *ACPClient) openSession() []byte {
	params := map[string]any{"cwd": c.session.Cwd, "mcpServers": acpMCPServers(c.session.MCPServers)}
	if c.resumeID != "" {
		params["sessionId"] = c.resumeID
		return rpcRequest(rpcOpenID, "session/load", params)
	}
	return rpcRequest(rpcOpenID, "session/new", params)
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
	return rpcRequest(id, "session/prompt", map[string]any{"sessionId": sid,
		"prompt": []any{map[string]any{"type": "text", "text": text}}})
}

// Interrupt implements Dialect: session/cancel, and the answer cancelled
// to every permission request still waiting.
func (c *ACPClient) Interrupt() []byte {
	var out []byte
	for _, id := range c.asks.takeAll() {
		out = append(out, rpcResult(id, map[string]any{"outcome": map[string]any{"outcome": "cancelled"}})...)
	}
	return append(out, rpcNotification("session/cancel", map[string]any{"sessionId": c.SessionID()})...)
}

// Refuse implements Dialect: the client answers the agent's requests as
// it parses them (Event.Write).
func (c *ACPClient) Refuse(AgentRequest) []byte { return nil }

// Answer implements Dialect: the owner's answer to a permission request
// (AGENT_APPROVAL); nil when it is no longer waiting (the turn was
// cancelled).
func (c *ACPClient) Answer(ask PermissionAsk, allow bool, _ string) []byte {
	a, ok := c.asks.take(ask.ID)
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
		return rpcResult(id, map[string]any{"outcome": map[string]any{"outcome": "cancelled"}})
	}
	return rpcResult(id, map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": option}})
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
func (c *ACPClient) ParseLine(line []byte) []Event { return parseRPC(c, line) }

func (c *ACPClient) notification(method string, params gjson.Result) []Event {
	if method == "session/update" {
		return c.update(params.Get("update"))
	}
	return nil
}

func (c *ACPClient) response(id string, v gjson.Result) []Event {
	e := v.Get("error")
	switch {
	case id == rpcInitID && e.Exists():
		return rpcOpenFailed(rpcErrorText(e), false)
	case id == rpcInitID:
		if c.resumeID != "" && !v.Get("result.agentCapabilities.loadSession").Bool() {
			return rpcOpenFailed("the agent offers no session/load", true)
		}
		return []Event{{Write: c.openSession()}}
	case id == rpcOpenID && e.Exists():
		return rpcOpenFailed(rpcErrorText(e), c.resumeID != "")
	case id == rpcOpenID:
		return c.opensSession(v.Get("result"))
	case strings.HasPrefix(id, acpPromptID):
		return c.promptEnded(v)
	}
	return nil
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
	return rpcOpened(sid, c.model)
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
		msg := rpcErrorText(e)
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
		return []Event{{Progress: &ProgressNote{Step: cutText(planLine(u.Get("entries"), "content"), 1024)}}}
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

// planLine is a plan as one line, "plan: [x] a; [>] b; [ ] c": each
// entry's text (its field text) and status (completed, in progress as
// ACP's in_progress or Codex's inProgress, else pending).
func planLine(entries gjson.Result, text string) string {
	var parts []string
	entries.ForEach(func(_, e gjson.Result) bool {
		mark := "[ ]"
		switch e.Get("status").String() {
		case "completed":
			mark = "[x]"
		case "in_progress", "inProgress":
			mark = "[>]"
		}
		parts = append(parts, mark+" "+e.Get(text).String())
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
	return []Event{{Write: rpcError(id, rpcMethodNotFound,
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
	if !shell {
		return []Event{{Write: acpSelect(id, a.allow)}}
	}
	rules := commandRules{allowed: c.session.Allowed, approval: c.session.Approval}
	return decide(rules, &c.asks, id, command, a, acpSelect(id, a.allow), acpSelect(id, a.reject))
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
