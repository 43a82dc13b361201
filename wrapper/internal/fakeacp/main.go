// Command fakeacp is an agent that speaks the Agent Client Protocol (v1)
// on its stdio, for the wrapper's tests of its ACP adapter: the
// wrapper's client against a real process and real pipes, with behaviour
// scripted by words in the prompt:
//
//	fake:plan          a plan update
//	fake:tool <cmd>    asks permission to run the shell command <cmd> (to
//	                   the end of the line), runs it with sh -c when allowed
//	fake:sleep <secs>  waits, or until session/cancel
//	fake:fs            asks the client for fs/read_text_file
//	fake:error         answers the prompt with a JSON-RPC error (HTTP 401)
//	fake:history       its answer lists the session's earlier prompts
//
// It keeps each session's prompts in FAKEACP_STATE (a directory), so that
// session/load works across processes; FAKEACP_NO_LOAD=1 offers no
// session/load. Its final message ends with a complete stop output.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type agent struct {
	mu      sync.Mutex
	out     *bufio.Writer
	nextID  int
	waiting map[string]chan message // our requests' answers, by id
	cancel  chan struct{}           // closed by session/cancel of the turn in progress
	state   string
	caps    json.RawMessage // the client's capabilities
}

func main() {
	a := &agent{out: bufio.NewWriter(os.Stdout), waiting: map[string]chan message{}, state: os.Getenv("FAKEACP_STATE")}
	if a.state == "" {
		a.state = filepath.Join(os.TempDir(), "fakeacp")
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		var m message
		if json.Unmarshal(in.Bytes(), &m) != nil {
			continue
		}
		a.handle(m)
	}
}

func (a *agent) send(v any) {
	b, _ := json.Marshal(v)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.out.Write(append(b, '\n'))
	a.out.Flush()
}

func (a *agent) reply(id json.RawMessage, result any) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (a *agent) fail(id json.RawMessage, code int, msg string) {
	a.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}

func (a *agent) update(sid string, u map[string]any) {
	a.send(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": sid, "update": u}})
}

// ask sends a request to the client and waits for its answer.
func (a *agent) ask(method string, params any) message {
	a.mu.Lock()
	a.nextID++
	id := strconv.Itoa(a.nextID)
	ch := make(chan message, 1)
	a.waiting[id] = ch
	a.mu.Unlock()
	a.send(map[string]any{"jsonrpc": "2.0", "id": a.nextID, "method": method, "params": params})
	return <-ch
}

func (a *agent) handle(m message) {
	if m.Method == "" { // an answer to one of ours
		a.mu.Lock()
		ch := a.waiting[string(m.ID)]
		delete(a.waiting, string(m.ID))
		a.mu.Unlock()
		if ch != nil {
			ch <- m
		}
		return
	}
	var p struct {
		SessionID          string          `json:"sessionId"`
		ClientCapabilities json.RawMessage `json:"clientCapabilities"`
		Prompt             []struct {
			Text string `json:"text"`
		} `json:"prompt"`
	}
	_ = json.Unmarshal(m.Params, &p)
	switch m.Method {
	case "initialize":
		a.caps = p.ClientCapabilities
		a.reply(m.ID, map[string]any{"protocolVersion": 1, "agentCapabilities": map[string]any{"loadSession": os.Getenv("FAKEACP_NO_LOAD") != "1"},
			"agentInfo": map[string]any{"name": "fakeacp", "version": "1"}})
	case "session/new":
		sid := fmt.Sprintf("fake-%d", time.Now().UnixNano())
		_ = os.MkdirAll(a.state, 0o755)
		_ = os.WriteFile(a.history(sid), nil, 0o644)
		a.reply(m.ID, map[string]any{"sessionId": sid})
	case "session/load":
		a.load(m.ID, p.SessionID)
	case "session/prompt":
		var text []string
		for _, c := range p.Prompt {
			text = append(text, c.Text)
		}
		a.mu.Lock()
		a.cancel = make(chan struct{})
		cancel := a.cancel
		a.mu.Unlock()
		go a.prompt(m.ID, p.SessionID, strings.Join(text, "\n"), cancel)
	case "session/cancel":
		a.mu.Lock()
		if a.cancel != nil {
			close(a.cancel)
			a.cancel = nil
		}
		a.mu.Unlock()
	default:
		if m.ID != nil {
			a.fail(m.ID, -32601, "method not found: "+m.Method)
		}
	}
}

func (a *agent) history(sid string) string { return filepath.Join(a.state, sid+".jsonl") }

func (a *agent) prompts(sid string) []string {
	b, _ := os.ReadFile(a.history(sid))
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s string
		if json.Unmarshal([]byte(l), &s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// load replays the session's history, as ACP's session/load does, then
// answers.
func (a *agent) load(id json.RawMessage, sid string) {
	if _, err := os.Stat(a.history(sid)); err != nil {
		a.fail(id, -32002, "Resource not found: session "+sid)
		return
	}
	for _, p := range a.prompts(sid) {
		a.update(sid, map[string]any{"sessionUpdate": "user_message_chunk", "content": map[string]any{"type": "text", "text": p}})
		a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "an earlier answer"}})
	}
	a.reply(id, nil)
}

func (a *agent) prompt(id json.RawMessage, sid, text string, cancel chan struct{}) {
	earlier := a.prompts(sid)
	b, _ := json.Marshal(text)
	if f, err := os.OpenFile(a.history(sid), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
		f.Write(append(b, '\n'))
		f.Close()
	}
	result := map[string]any{"prompts": len(earlier) + 1}
	a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "Working on it."}})
	for _, line := range strings.Split(text, "\n") {
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch word {
		case "fake:plan":
			a.update(sid, map[string]any{"sessionUpdate": "plan", "entries": []any{
				map[string]any{"content": "read the code", "priority": "high", "status": "completed"},
				map[string]any{"content": "fix the bug", "priority": "high", "status": "in_progress"}}})
		case "fake:tool":
			result["tool"] = a.tool(sid, rest)
		case "fake:fs":
			ans := a.ask("fs/read_text_file", map[string]any{"sessionId": sid, "path": "/etc/hostname"})
			result["fs_error"], result["fs_caps"] = ans.Error != nil && ans.Error.Code == -32601, string(a.caps)
		case "fake:error":
			a.fail(id, -32603, "model API error: status 401 invalid x-api-key")
			return
		case "fake:history":
			result["history"] = earlier
		case "fake:sleep":
			secs, _ := strconv.ParseFloat(rest, 64)
			select {
			case <-time.After(time.Duration(secs * float64(time.Second))):
			case <-cancel:
				a.reply(id, map[string]any{"stopReason": "cancelled"})
				return
			}
		}
	}
	final, _ := json.Marshal(map[string]any{"status": "complete", "result": result})
	a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": "Done.\n"}})
	a.update(sid, map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": string(final)}})
	a.reply(id, map[string]any{"stopReason": "end_turn", "usage": map[string]any{"inputTokens": 100, "outputTokens": 20, "totalTokens": 120}})
}

// tool asks permission for a shell command and runs it when allowed: it
// says what became of it.
func (a *agent) tool(sid, command string) string {
	tc := fmt.Sprintf("call-%d", time.Now().UnixNano())
	a.update(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": tc, "title": command, "kind": "execute", "status": "pending",
		"rawInput": map[string]any{"command": command}})
	ans := a.ask("session/request_permission", map[string]any{"sessionId": sid,
		"toolCall": map[string]any{"toolCallId": tc, "title": command, "kind": "execute", "rawInput": map[string]any{"command": command}},
		"options": []any{
			map[string]any{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
			map[string]any{"optionId": "no", "name": "Reject", "kind": "reject_once"}}})
	var r struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	_ = json.Unmarshal(ans.Result, &r)
	switch {
	case r.Outcome.Outcome == "cancelled":
		a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": tc, "status": "failed"})
		return "cancelled"
	case r.Outcome.OptionID != "yes":
		a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": tc, "status": "failed"})
		return "rejected"
	}
	a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": tc, "status": "in_progress"})
	out, err := exec.Command("sh", "-c", command).CombinedOutput()
	status := "completed"
	if err != nil {
		status = "failed"
	}
	a.update(sid, map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": tc, "status": status,
		"content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": string(out)}}}})
	return "ran: " + strings.TrimSpace(string(out))
}
