package agent

import (
	"encoding/json"

	"github.com/tidwall/gjson"
)

// JSON-RPC 2.0, one message a line: what the wrapper writes to an agent
// that speaks it (an ACP agent, `codex app-server`). Ids are the
// wrapper's strings; an id of the agent's is echoed as the raw JSON it
// sent.

func rpcRequest(id, method string, params any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return append(b, '\n')
}

// rpcNotification is a notification; nil params are left out.
func rpcNotification(method string, params any) []byte {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	return append(b, '\n')
}

// rpcResult answers the agent's request id (raw JSON) with result.
func rpcResult(id string, result any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "result": result})
	return append(b, '\n')
}

func rpcError(id string, code int, message string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id),
		"error": map[string]any{"code": code, "message": message}})
	return append(b, '\n')
}

// rpcMethodNotFound is JSON-RPC's "method not found".
const rpcMethodNotFound = -32601

// The ids of a client's opening requests: initialize, then the request
// that opens the session (Event.Control's RequestID, which
// Persistent.Open waits for).
const (
	rpcInitID = "agentvisor-init"
	rpcOpenID = "agentvisor-open"
)

// rpcOpened is the answer to the opening of session sid: the init, then
// the success Persistent.Open waits for.
func rpcOpened(sid, model string) []Event {
	return []Event{
		{Init: &Init{SessionID: sid, Model: model}},
		{Control: &ControlResponse{RequestID: rpcOpenID, Subtype: "success"}},
	}
}

// rpcOpenFailed is the failure of the opening; notFound: the session to
// resume is not there (ErrSessionNotFound).
func rpcOpenFailed(msg string, notFound bool) []Event {
	return []Event{{Control: &ControlResponse{RequestID: rpcOpenID, Subtype: "error", Error: msg, NotFound: notFound}}}
}

// rpcClient is what a JSON-RPC client makes of each kind of message of its
// agent: a request (method and id), a notification (method), the answer
// to a request of its own (id).
type rpcClient interface {
	request(id, method string, params gjson.Result) []Event
	notification(method string, params gjson.Result) []Event
	response(id string, msg gjson.Result) []Event
}

// parseRPC hands one line of an agent to c by its kind; a line that is no
// JSON object gives no event.
func parseRPC(c rpcClient, line []byte) []Event {
	v, ok := jsonObject(line)
	if !ok {
		return nil
	}
	method, id := v.Get("method").String(), v.Get("id")
	switch {
	case method != "" && id.Exists():
		return c.request(id.Raw, method, v.Get("params"))
	case method != "":
		return c.notification(method, v.Get("params"))
	case id.Exists():
		return c.response(id.String(), v)
	}
	return nil
}

// rpcErrorText is a JSON-RPC error's message, with its data when any.
func rpcErrorText(e gjson.Result) string {
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
