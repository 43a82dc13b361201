package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// DroidRPC speaks Droid's JSON-RPC mode (`droid exec --input-format
// stream-jsonrpc --output-format stream-jsonrpc`), in which one Droid
// process serves the messages of a session: it is the Dialect of a
// persistent Droid and the Parser of its output. One value serves one
// process. Found with Droid 0.225.2 (wrapper/README.md, "A persistent
// Droid"):
//
//   - every line is a JSON-RPC 2.0 document that also carries "type"
//     (request, response, notification), "factoryApiVersion" and
//     "factoryProtocolVersion"; without them Droid answers -32700;
//   - droid.initialize_session opens a new session, droid.load_session a
//     session from its local files (no cloud, unlike `exec --session-id`);
//     an unknown one is refused with -32004. No message may come before
//     the answer. CLI flags (-m, --auto) do not configure the session:
//     its model and autonomy come in the request; --settings (hooks),
//     --skip-permissions-unsafe and --append-system-prompt do apply;
//   - droid.add_user_message starts a turn; one sent while a turn runs
//     joins it (the model sees it in its next call, with a reminder that
//     it is steering) or, during the turn's last call, starts the next
//     turn. Each user message taken is echoed (create_message, role user,
//     with the request's id);
//   - droid.interrupt_session ends the turn in progress (its tool
//     process is killed) and the process stays: the turn completes with
//     reason "cancelled";
//   - the turn's end is the notification agent_turn_completed (reason
//     completed, cancelled, model_authentication_failed, ...) with the
//     turn's token usage; the answer is in the assistant's create_message
//     notifications before it.
//
// A second initialize_session in the same process gives a session that
// carries the first one's turns to the model: a process serves one
// session.
type DroidRPC struct {
	session  DroidSession
	resumeID string
	seq      atomic.Int64

	// The parser's state, owned by the goroutine that reads the output.
	turnText   string // the last assistant text of the turn in progress
	turnModels int    // assistant messages (model calls) of the turn
	turnError  string // the turn's error notification, or its system message
}

// DroidSession is what a persistent Droid's session is opened with.
type DroidSession struct {
	Cwd     string
	ModelID string // e.g. custom:agentvisor; "" for Droid's default
	// SkipPermissions runs every tool call unasked (the session's
	// skipPermissionsUnsafe); otherwise AutonomyLevel (low, medium,
	// high) says what runs, and what it does not is refused, never
	// asked (autoRejectPermissionRequests).
	SkipPermissions bool
	AutonomyLevel   string
}

// NewDroidRPC returns the dialect and parser of one Droid process whose
// session is resumeID ("": a new one).
func NewDroidRPC(session DroidSession, resumeID string) *DroidRPC {
	return &DroidRPC{session: session, resumeID: resumeID}
}

var (
	_ Dialect = (*DroidRPC)(nil)
	_ Parser  = (*DroidRPC)(nil)
)

// The versions Droid 0.225.2 speaks; the ids of the wrapper's requests
// say what each answers.
const (
	droidAPIVersion      = "1.0.0"
	droidProtocolVersion = "1.220.0"
	droidOpenID          = "agentvisor-open"
	droidMessageID       = "agentvisor-message-"
	droidSteerID         = "agentvisor-steer-"
	droidInterruptID     = "agentvisor-interrupt-"
	// droidSessionNotFound is load_session's error for an unknown session.
	droidSessionNotFound = -32004
)

func (d *DroidRPC) request(id, method string, params any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "type": "request", "factoryApiVersion": droidAPIVersion,
		"factoryProtocolVersion": droidProtocolVersion, "id": id, "method": method, "params": params})
	return append(b, '\n')
}

func (d *DroidRPC) nextID(prefix string) string { return fmt.Sprintf("%s%d", prefix, d.seq.Add(1)) }

// Open implements Dialect: droid.load_session, or droid.initialize_session
// for a new session.
func (d *DroidRPC) Open() ([]byte, string) {
	if d.resumeID != "" {
		return d.request(droidOpenID, "droid.load_session", map[string]any{"sessionId": d.resumeID, "autoRejectPermissionRequests": true}), droidOpenID
	}
	params := map[string]any{"machineId": "agentvisor", "cwd": d.session.Cwd, "autoRejectPermissionRequests": true}
	if d.session.ModelID != "" {
		params["modelId"] = d.session.ModelID
	}
	if d.session.SkipPermissions {
		params["skipPermissionsUnsafe"] = true
	} else if d.session.AutonomyLevel != "" {
		params["autonomyLevel"] = d.session.AutonomyLevel
	}
	return d.request(droidOpenID, "droid.initialize_session", params), droidOpenID
}

// Message implements Dialect.
func (d *DroidRPC) Message(text string, steer bool) []byte {
	prefix := droidMessageID
	if steer {
		prefix = droidSteerID
	}
	return d.request(d.nextID(prefix), "droid.add_user_message", map[string]any{"text": text})
}

// Interrupt implements Dialect.
func (d *DroidRPC) Interrupt() []byte {
	return d.request(d.nextID(droidInterruptID), "droid.interrupt_session", map[string]any{})
}

// Refuse implements Dialect: an error answer, so that Droid does not wait
// for one (permission requests are rejected by the session itself).
func (d *DroidRPC) Refuse(r AgentRequest) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "type": "response", "factoryApiVersion": droidAPIVersion,
		"factoryProtocolVersion": droidProtocolVersion, "id": json.RawMessage(r.ID),
		"error": map[string]any{"code": -32601, "message": "agentvisor answers no " + r.Method + " request: the worker runs unattended"}})
	return append(b, '\n')
}

// Answer implements Dialect: Droid asks for no permission
// (autoRejectPermissionRequests).
func (d *DroidRPC) Answer(PermissionAsk, bool, string) []byte { return nil }

// Echoes implements Dialect: Droid echoes every user message it takes.
func (d *DroidRPC) Echoes() bool { return true }

// KillOnClose implements Dialect: Droid takes about 6 s to exit after its
// stdin closes (or on SIGTERM), and its session file holds every message
// as it is made, so its group is killed at once.
func (d *DroidRPC) KillOnClose() bool { return true }

// ParseLine implements Parser.
func (d *DroidRPC) ParseLine(line []byte) []Event {
	v, ok := jsonObject(line)
	if !ok {
		return nil
	}
	switch v.Get("type").String() {
	case "response":
		return d.response(v)
	case "request":
		return []Event{{Request: &AgentRequest{ID: v.Get("id").Raw, Method: v.Get("method").String()}}}
	case "notification":
		if v.Get("method").String() == "droid.session_notification" {
			return d.notification(v.Get("params.sessionId").String(), v.Get("params.notification"))
		}
	}
	return nil
}

func (d *DroidRPC) response(v gjson.Result) []Event {
	id := v.Get("id").String()
	e := v.Get("error")
	switch {
	case id == droidOpenID && e.Exists():
		return []Event{{Control: &ControlResponse{RequestID: id, Subtype: "error", Error: e.Get("message").String(), Code: int(e.Get("code").Int())}}}
	case id == droidOpenID:
		sid := v.Get("result.sessionId").String()
		if sid == "" {
			sid = d.resumeID // load_session answers with the session, not its id
		}
		return []Event{
			{Init: &Init{SessionID: sid, Model: v.Get("result.settings.modelId").String()}},
			{Control: &ControlResponse{RequestID: id, Subtype: "success"}},
		}
	case !e.Exists():
		return nil
	case strings.HasPrefix(id, droidMessageID):
		// The message was refused: no turn will come for it.
		return []Event{{Result: &Result{Text: "Droid refused the message: " + e.Get("message").String(), IsError: true, Subtype: "error"}}}
	case strings.HasPrefix(id, droidSteerID):
		// A steering message refused will not be echoed: count it as
		// taken, so that the task does not wait for it.
		return []Event{{Replay: true}}
	}
	return nil
}

func (d *DroidRPC) notification(sessionID string, n gjson.Result) []Event {
	switch n.Get("type").String() {
	case "create_message":
		m := n.Get("message")
		switch m.Get("role").String() {
		case "user":
			if n.Get("requestId").String() != "" { // a message of ours (the context ones carry none)
				return []Event{{Replay: true}}
			}
		case "assistant":
			d.turnModels++
			var evs []Event
			var text []string
			m.Get("content").ForEach(func(_, c gjson.Result) bool {
				switch c.Get("type").String() {
				case "text":
					text = append(text, c.Get("text").String())
				case "tool_use":
					evs = append(evs, Event{ToolCall: &ToolCall{Name: c.Get("name").String(), Input: json.RawMessage(c.Get("input").Raw)}})
				}
				return true
			})
			if len(text) > 0 {
				d.turnText = strings.Join(text, "\n")
			}
			return evs
		case "system":
			if d.turnError == "" {
				m.Get("content").ForEach(func(_, c gjson.Result) bool {
					if c.Get("type").String() == "text" {
						d.turnError = c.Get("text").String()
					}
					return d.turnError == ""
				})
			}
		}
	case "error":
		d.turnError = n.Get("message").String()
	case "agent_turn_completed":
		reason := n.Get("reason").String()
		u := n.Get("tokenUsage")
		r := &Result{
			Text: d.turnText, Subtype: reason, SessionID: sessionID, Turns: d.turnModels,
			DurationMS: n.Get("durationMs").Int(),
			Usage: protocol.Usage{
				Input:         tokens(u.Get("inputTokens")),
				Output:        tokens(u.Get("outputTokens")),
				CacheRead:     tokens(u.Get("cacheReadTokens")),
				CacheCreation: tokens(u.Get("cacheCreationTokens")),
			},
		}
		if reason != "completed" {
			r.IsError = true
			r.Text = d.turnError
			if r.Text == "" {
				r.Text = "the turn ended: " + reason
			}
			r.APIErrorStatus = errorStatus(r.Text)
		}
		d.turnText, d.turnModels, d.turnError = "", 0, ""
		return []Event{{Result: r}}
	}
	return nil
}

// errorStatus reads the HTTP status in Droid's API error messages ("401
// {...}", "BYOK Error: 401 {...}"); 0 when there is none.
func errorStatus(msg string) int {
	if s := leadingStatus(msg); s != 0 {
		return s
	}
	if _, rest, ok := strings.Cut(msg, "Error: "); ok {
		return leadingStatus(rest)
	}
	return 0
}
