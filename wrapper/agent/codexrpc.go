package agent

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// CodexAppServer is the wrapper's side of `codex app-server`, Codex's
// headless JSON-RPC server (JSON-RPC 2.0, one message a line, on its stdin
// and stdout; the protocol its IDE extension speaks, printed by `codex
// app-server generate-json-schema`): the Dialect of a persistent Codex and
// the Parser of its output. One value serves one process and one thread.
// Found with Codex 0.171.0 against the stub model (wrapper/README.md,
// "Codex"):
//
//   - Open sends initialize; on its answer the client sends initialized
//     and opens the thread itself (an Event.Write): thread/resume of the
//     session to resume, else thread/start, each with the workspace as
//     cwd, sandbox danger-full-access (the container is the sandbox) and
//     the thread's approval policy. A thread Codex cannot resume ("no
//     rollout found for thread id ...") gives ErrSessionNotFound, and the
//     session policy runs the task in a new session.
//   - A task is one turn/start on the thread; turn/completed ends it
//     (status completed, interrupted, or failed with the error's message
//     and HTTP status). The stop output is read from the turn's last
//     agentMessage item. Each thread/tokenUsage/updated of the turn gives
//     one model call's usage (its "last"): a Turn event each, and the
//     result's usage is their sum.
//   - Interrupt is turn/interrupt of the turn in progress: Codex kills the
//     turn's command and ends it (interrupted) at once; the process stays.
//     An interrupt that comes before the turn's id is sent when the id
//     comes.
//   - Approvals: under an ALLOWED_COMMANDS list the thread's approval
//     policy is "untrusted" (which Codex refuses in config.toml and on its
//     command line since 0.149, and still takes for a thread), so that
//     Codex asks before every command (item/commandExecution/
//     requestApproval), file change (item/fileChange/requestApproval) and
//     MCP tool call (an mcpServer/elicitation/request whose
//     codex_approval_kind is mcp_tool_call). A command is decided by
//     ALLOWED_COMMANDS on the script Codex runs in its shell (codexScript);
//     what the list refuses is asked of the task's owner with
//     AGENT_APPROVAL (Event.Permission, answered by Answer), else declined
//     and reported (Event.Denied). File changes and MCP tool calls are
//     accepted: the list governs shell commands, as for the other agents.
//     Under "*" the policy is "never": Codex asks nothing. The PreToolUse
//     hook that guards `codex exec` does not run under app-server (an
//     untrusted hook is skipped, and only exec takes
//     --dangerously-bypass-hook-trust).
//   - Every other request of Codex is declined or refused (-32601): the
//     worker runs unattended.
//   - A steering message is the session's next turn (Message(steer) is
//     nil), as for an ACP agent.
//   - turn/plan/updated becomes a progress note; an error notification
//     that Codex will retry (willRetry) an APIRetry.
type CodexAppServer struct {
	session  CodexSession
	resumeID string
	seq      atomic.Int64

	asks pendingAsks[struct{}] // approval requests waiting for the owner

	mu        sync.Mutex // guards the fields below: set by the reading goroutine, read by the task loop
	threadID  string
	turnID    string // the turn in progress; "" between turns
	interrupt bool   // an interrupt came before the turn's id

	// The parser's state, owned by the goroutine that reads the output.
	last  string         // the turn's last agent message
	turns int            // agent messages and tool calls of the turn
	calls int            // model calls of the turn
	usage protocol.Usage // the turn's model calls' usage
}

// CodexSession is what a persistent Codex's thread is opened with, and
// how its approval requests are answered.
type CodexSession struct {
	Cwd      string
	Allowed  protocol.AllowedCommands
	Approval bool // AGENT_APPROVAL: ask the task's owner about what Allowed refuses
}

// The ids of the client's requests say what each answer is.
const (
	codexTurnID      = "agentvisor-turn-"
	codexInterruptID = "agentvisor-interrupt-"
)

// NewCodexAppServer returns the dialect and parser of one `codex
// app-server` process whose thread is resumeID ("": a new one).
func NewCodexAppServer(session CodexSession, resumeID string) *CodexAppServer {
	return &CodexAppServer{session: session, resumeID: resumeID}
}

var (
	_ Dialect = (*CodexAppServer)(nil)
	_ Parser  = (*CodexAppServer)(nil)
)

// Open implements Dialect: initialize. The thread is opened on its answer
// (ParseLine).
func (c *CodexAppServer) Open() ([]byte, string) {
	return rpcRequest(rpcInitID, "initialize", map[string]any{
		"clientInfo": map[string]any{"name": "agentvisor", "title": "agentvisor", "version": "1"}}), rpcOpenID
}

// openThread is the initialized notification, then thread/resume of the
// thread to resume or thread/start.
func (c *CodexAppServer) openThread() []byte {
	params := map[string]any{"cwd": c.session.Cwd, "sandbox": "danger-full-access", "approvalPolicy": c.approvalPolicy()}
	method := "thread/start"
	if c.resumeID != "" {
		method, params["threadId"], params["excludeTurns"] = "thread/resume", c.resumeID, true
	}
	return append(rpcNotification("initialized", nil), rpcRequest(rpcOpenID, method, params)...)
}

// approvalPolicy is the thread's: Codex asks before everything under a
// list, before nothing under "*".
func (c *CodexAppServer) approvalPolicy() string {
	if c.session.Allowed.ShellRules().All {
		return "never"
	}
	return "untrusted"
}

// Message implements Dialect: a turn/start on the thread. A steering
// message is nil: it is the session's next turn.
func (c *CodexAppServer) Message(text string, steer bool) []byte {
	if steer {
		return nil
	}
	c.mu.Lock()
	tid := c.threadID
	c.interrupt = false
	c.mu.Unlock()
	id := codexTurnID + strconv.FormatInt(c.seq.Add(1), 10)
	return rpcRequest(id, "turn/start", map[string]any{"threadId": tid,
		"input": []any{map[string]any{"type": "text", "text": text, "text_elements": []any{}}}})
}

// Interrupt implements Dialect: turn/interrupt of the turn in progress, or
// nil while its id has not come (it is sent when it comes). The approvals
// still waiting are dropped: Codex resolves them itself.
func (c *CodexAppServer) Interrupt() []byte {
	c.asks.takeAll()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.turnID == "" {
		c.interrupt = true
		return nil
	}
	return c.interruptLocked()
}

func (c *CodexAppServer) interruptLocked() []byte {
	id := codexInterruptID + strconv.FormatInt(c.seq.Add(1), 10)
	return rpcRequest(id, "turn/interrupt", map[string]any{"threadId": c.threadID, "turnId": c.turnID})
}

// Refuse implements Dialect: the client answers Codex's requests as it
// parses them (Event.Write).
func (c *CodexAppServer) Refuse(AgentRequest) []byte { return nil }

// Answer implements Dialect: the owner's answer to an approval request
// (AGENT_APPROVAL); nil when Codex no longer waits for it. Codex takes no
// reason with a declined command: the model reads that it was declined.
func (c *CodexAppServer) Answer(ask PermissionAsk, allow bool, _ string) []byte {
	if _, ok := c.asks.take(ask.ID); !ok {
		return nil
	}
	if allow {
		return codexDecision(ask.ID, "accept")
	}
	return codexDecision(ask.ID, "decline")
}

func codexDecision(id, decision string) []byte {
	return rpcResult(id, map[string]any{"decision": decision})
}

// Echoes implements Dialect: Codex echoes no user message the wrapper
// counts.
func (c *CodexAppServer) Echoes() bool { return false }

// KillOnClose implements Dialect: Codex exits within milliseconds once its
// stdin closes, its thread saved as it goes.
func (c *CodexAppServer) KillOnClose() bool { return false }

// ParseLine implements Parser.
func (c *CodexAppServer) ParseLine(line []byte) []Event { return parseRPC(c, line) }

func (c *CodexAppServer) response(id string, v gjson.Result) []Event {
	e := v.Get("error")
	switch {
	case id == rpcInitID && e.Exists():
		return rpcOpenFailed(rpcErrorText(e), false)
	case id == rpcInitID:
		return []Event{{Write: c.openThread()}}
	case id == rpcOpenID && e.Exists():
		return rpcOpenFailed(rpcErrorText(e), c.resumeID != "")
	case id == rpcOpenID:
		return c.opened(v.Get("result"))
	case strings.HasPrefix(id, codexTurnID) && e.Exists():
		// The turn was refused: none will come for the message.
		return []Event{{Result: &Result{Text: "Codex refused the turn: " + rpcErrorText(e), IsError: true, Subtype: "error",
			SessionID: c.thread()}}}
	case strings.HasPrefix(id, codexTurnID):
		return c.turnStarted(v.Get("result.turn.id").String())
	}
	return nil
}

// opened takes the answer to thread/start or thread/resume.
func (c *CodexAppServer) opened(result gjson.Result) []Event {
	tid := result.Get("thread.id").String()
	if tid == "" {
		tid = c.resumeID
	}
	c.mu.Lock()
	c.threadID = tid
	c.mu.Unlock()
	return rpcOpened(tid, result.Get("model").String())
}

func (c *CodexAppServer) thread() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.threadID
}

// turnStarted records the id of the turn in progress (from turn/start's
// answer or turn/started, whichever comes first), and sends an interrupt
// that waited for it.
func (c *CodexAppServer) turnStarted(turnID string) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	if turnID == "" || c.turnID != "" {
		return nil
	}
	c.turnID = turnID
	c.last, c.turns, c.calls, c.usage = "", 0, 0, protocol.Usage{}
	if c.interrupt {
		c.interrupt = false
		return []Event{{Write: c.interruptLocked()}}
	}
	return nil
}

// inTurn reports whether a notification of turnID belongs to the turn in
// progress (a resumed thread repeats its last turn's usage first).
func (c *CodexAppServer) inTurn(turnID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.turnID != "" && c.turnID == turnID
}

func (c *CodexAppServer) notification(method string, p gjson.Result) []Event {
	switch method {
	case "turn/started":
		return c.turnStarted(p.Get("turn.id").String())
	case "item/started":
		return c.itemStarted(p.Get("item"))
	case "item/completed":
		if item := p.Get("item"); item.Get("type").String() == "agentMessage" && c.inTurn(p.Get("turnId").String()) {
			c.last = item.Get("text").String()
			c.turns++
		}
	case "thread/tokenUsage/updated":
		if !c.inTurn(p.Get("turnId").String()) {
			return nil
		}
		u := p.Get("tokenUsage.last")
		call := openAIUsage(tokens(u.Get("inputTokens")), tokens(u.Get("cachedInputTokens")),
			tokens(u.Get("outputTokens")), tokens(u.Get("cacheWriteInputTokens")))
		c.calls++
		c.usage = c.usage.Add(call)
		return []Event{{Turn: &Turn{MessageID: fmt.Sprintf("%s-%d", p.Get("turnId").String(), c.calls), Usage: call}}}
	case "turn/plan/updated":
		return []Event{{Progress: &ProgressNote{Step: cutText(planLine(p.Get("plan"), "step"), 1024)}}}
	case "error":
		if p.Get("willRetry").Bool() {
			return []Event{{Retry: codexRetryOf(p.Get("error"))}}
		}
	case "serverRequest/resolved":
		c.asks.take(p.Get("requestId").Raw)
	case "turn/completed":
		return c.turnCompleted(p.Get("turn"))
	}
	return nil
}

// codexItemTypes are the app-server's names of the tool items that `codex
// exec --json` names otherwise; their fields are the same.
var codexItemTypes = map[string]string{"commandExecution": "command_execution", "mcpToolCall": "mcp_tool_call", "fileChange": "file_change"}

// itemStarted turns the start of a tool item into a ToolCall, as
// CodexParser does for `codex exec`.
func (c *CodexAppServer) itemStarted(item gjson.Result) []Event {
	typ, ok := codexItemTypes[item.Get("type").String()]
	if !ok {
		return nil
	}
	var p CodexParser
	evs := p.started(typ, item)
	c.turns += p.turns
	return evs
}

// turnCompleted is the turn's result.
func (c *CodexAppServer) turnCompleted(turn gjson.Result) []Event {
	c.mu.Lock()
	if turn.Get("id").String() != c.turnID {
		c.mu.Unlock()
		return nil
	}
	c.turnID, c.interrupt = "", false
	tid := c.threadID
	c.mu.Unlock()
	c.asks.takeAll()
	r := &Result{Text: c.last, Subtype: turn.Get("status").String(), SessionID: tid, Turns: c.turns, Usage: c.usage,
		DurationMS: turn.Get("durationMs").Int()}
	switch r.Subtype {
	case "completed":
	case "failed":
		e := turn.Get("error")
		r.IsError, r.Text, r.APIErrorStatus = true, codexErrorText(e), codexErrorStatus(e)
	default:
		r.IsError, r.Text = true, "the turn ended: "+r.Subtype
	}
	return []Event{{Result: r}}
}

// codexErrorText is a turn error's message, with its details.
func codexErrorText(e gjson.Result) string {
	msg := e.Get("message").String()
	if d := e.Get("additionalDetails").String(); d != "" && d != msg {
		msg += ": " + d
	}
	return msg
}

// codexErrorStatus is a turn error's HTTP status: its codexErrorInfo's
// httpStatusCode, else the one in its text; 0 when none.
func codexErrorStatus(e gjson.Result) int {
	status := 0
	e.Get("codexErrorInfo").ForEach(func(_, v gjson.Result) bool {
		status = int(v.Get("httpStatusCode").Int())
		return status == 0
	})
	if status == 0 {
		status = statusIn(codexErrorText(e))
	}
	return status
}

// codexRetryOf is an error Codex will retry ("Reconnecting... 2/5").
func codexRetryOf(e gjson.Result) *APIRetry {
	r := &APIRetry{Status: codexErrorStatus(e), Error: codexErrorText(e)}
	if m := codexRetry.FindStringSubmatch(e.Get("message").String()); m != nil {
		r.Attempt, _ = strconv.Atoi(m[1])
		r.MaxRetries, _ = strconv.Atoi(m[2])
	}
	return r
}

// request answers a request of Codex: see CodexAppServer.
func (c *CodexAppServer) request(id, method string, params gjson.Result) []Event {
	switch method {
	case "item/commandExecution/requestApproval":
		return c.command(id, params)
	case "item/fileChange/requestApproval":
		return []Event{{Write: codexDecision(id, "accept")}}
	case "mcpServer/elicitation/request":
		if params.Get("_meta.codex_approval_kind").String() == "mcp_tool_call" {
			return []Event{{Write: rpcResult(id, map[string]any{"action": "accept", "content": map[string]any{}})}}
		}
		return []Event{{Write: rpcResult(id, map[string]any{"action": "decline", "content": nil})}}
	case "item/permissions/requestApproval":
		// The sandbox is open already (danger-full-access): nothing to grant.
		return []Event{{Write: rpcResult(id, map[string]any{"permissions": map[string]any{}, "scope": "turn"})}}
	}
	return []Event{{Write: rpcError(id, rpcMethodNotFound, "agentvisor answers no "+method+": the worker runs unattended")}}
}

// command decides an approval request for a command: see CodexAppServer.
// One with no command (network access, input to a command that runs) is
// accepted: the list governs the commands Codex starts.
func (c *CodexAppServer) command(id string, params gjson.Result) []Event {
	cmd := params.Get("command")
	if !cmd.Exists() || cmd.Type == gjson.Null || params.Get("kind").String() == "writeStdin" {
		return []Event{{Write: codexDecision(id, "accept")}}
	}
	rules := commandRules{allowed: c.session.Allowed, approval: c.session.Approval}
	return decide(rules, &c.asks, id, codexScript(cmd.String()), struct{}{}, codexDecision(id, "accept"), codexDecision(id, "decline"))
}

// codexShells are the shells whose script codexScript takes out.
var codexShells = regexp.MustCompile(`^(ba|z)?sh$`)

// codexScript is the script of a command Codex runs through a shell, as
// it shows it (`/bin/bash -c '<script>'`, -lc for a login shell, quoted
// as a POSIX shell would read it): the command the model wrote, which
// ALLOWED_COMMANDS judges. A command of any other form is returned as it
// is: the list refuses it unless it allows everything.
func codexScript(command string) string {
	words, ok := protocol.ShellWords(command)
	if !ok || len(words) != 3 || (words[1] != "-c" && words[1] != "-lc") || !codexShells.MatchString(path.Base(words[0])) {
		return command
	}
	return words[2]
}
