package dashboard

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// The dashboard's actions on a worker, behind the operator's credential:
// each is a POST that writes the same document any consumer writes (a
// cancel, message or permission reply on the worker's input stream; a
// pause, unpause or delete command on the command stream, through the
// client package) and then records on the lifecycle stream who did it
// (an operator_action event). A browser's request must come from the
// dashboard's own origin and carry its session's CSRF token.

// CSRFHeader carries a browser session's CSRF token (GET /session).
const CSRFHeader = "X-CSRF-Token"

// maxActionBody bounds an action's JSON body (a message is at most 64 KiB).
const maxActionBody = 128 << 10

// ActionBody is what an action's JSON body may hold; each action reads
// the fields it needs. RequestID defaults to the worker's task in flight.
type ActionBody struct {
	RequestID    string `json:"request_id,omitempty"`
	Reason       string `json:"reason,omitempty"`        // cancel
	Text         string `json:"text,omitempty"`          // message
	PermissionID string `json:"permission_id,omitempty"` // allow, deny
	Message      string `json:"message,omitempty"`       // deny: why, for the model
}

// actionResult is an action's answer, and the detail of its lifecycle entry.
type actionResult struct {
	Action       string `json:"action"`
	Operator     string `json:"operator"`
	WorkerID     string `json:"worker_id"`
	RequestID    string `json:"request_id,omitempty"`
	PermissionID string `json:"permission_id,omitempty"`
	CommandID    string `json:"command_id,omitempty"`
}

// actionFunc does one action; it fills in res and returns an error with
// a stable code (a *client.Error) when it fails.
type actionFunc func(ctx context.Context, body ActionBody, res *actionResult) error

func (d *Dashboard) actionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /session", d.session)
	mux.HandleFunc("POST /workers/{id}/cancel", d.guard("cancel", d.cancelTask))
	mux.HandleFunc("POST /workers/{id}/message", d.guard("message", d.messageTask))
	mux.HandleFunc("POST /workers/{id}/allow", d.guard("allow", d.answer(true)))
	mux.HandleFunc("POST /workers/{id}/deny", d.guard("deny", d.answer(false)))
	mux.HandleFunc("POST /workers/{id}/pause", d.guard("pause", d.command(protocol.ActionPause)))
	mux.HandleFunc("POST /workers/{id}/resume", d.guard("resume", d.command(protocol.ActionUnpause)))
	mux.HandleFunc("POST /workers/{id}/hibernate", d.guard("hibernate", d.command(protocol.ActionHibernate)))
	mux.HandleFunc("POST /workers/{id}/delete", d.guard("delete", d.command(protocol.ActionDelete)))
}

// session tells the page who it acts as and the CSRF token its actions carry.
func (d *Dashboard) session(w http.ResponseWriter, r *http.Request) {
	op, ok := ops.OperatorFrom(r.Context())
	if !ok {
		writeError(w, http.StatusUnauthorized, protocol.CodeForbidden, "no operator credential")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]string{"operator": op.Name, "csrf": op.CSRF})
}

// guard checks the request (credential, origin, CSRF token, worker id,
// body), runs the action, records it and answers.
func (d *Dashboard) guard(action string, fn actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		op, ok := ops.OperatorFrom(r.Context())
		if !ok {
			writeError(w, http.StatusUnauthorized, protocol.CodeForbidden, "no operator credential")
			return
		}
		if err := sameOrigin(r); err != nil {
			writeError(w, http.StatusForbidden, protocol.CodeForbidden, "%v", err)
			return
		}
		if op.CSRF != "" && !hmac.Equal([]byte(r.Header.Get(CSRFHeader)), []byte(op.CSRF)) {
			writeError(w, http.StatusForbidden, protocol.CodeForbidden, "missing or wrong %s (GET /session gives it)", CSRFHeader)
			return
		}
		id := r.PathValue("id")
		if !runID.MatchString(id) {
			writeError(w, http.StatusBadRequest, protocol.CodeInvalidCommand, "worker id %q: want 1 to 256 letters, digits, '_', '.', ':', '-'", id)
			return
		}
		var body ActionBody
		if err := decodeBody(r, &body); err != nil {
			writeError(w, http.StatusBadRequest, protocol.CodeInvalidCommand, "%v", err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), d.commandTimeout()+5*time.Second)
		defer cancel()
		res := actionResult{Action: action, Operator: op.Name, WorkerID: id}
		err := fn(ctx, body, &res)
		if rerr := d.record(ctx, res, err); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			code := protocol.CodeInternalError
			var ce *client.Error
			if errors.As(err, &ce) {
				code = ce.Code
			}
			writeError(w, statusOf(code), code, "%s: %v", action, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}
}

// sameOrigin refuses a request a browser says comes from another site or
// origin: Sec-Fetch-Site other than same-origin, or an Origin that is not
// this host. A request with neither (a script, curl) passes: a browser
// always sends Origin with a POST.
func sameOrigin(r *http.Request) error {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site: %s)", s)
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Host != r.Host {
		return fmt.Errorf("cross-origin request refused (Origin %s, this is %s)", o, r.Host)
	}
	return nil
}

func decodeBody(r *http.Request, body *ActionBody) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(b) > maxActionBody {
		return fmt.Errorf("body over %d bytes", maxActionBody)
	}
	if len(b) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(body); err != nil {
		return fmt.Errorf("body: want a JSON object: %w", err)
	}
	return nil
}

func statusOf(code protocol.Code) int {
	switch code {
	case protocol.CodeNotFound:
		return http.StatusNotFound
	case protocol.CodeInvalidCommand, protocol.CodeInvalidTask:
		return http.StatusBadRequest
	case protocol.CodeWorkerBusy, protocol.CodeConflict:
		return http.StatusConflict
	case protocol.CodeUpstreamUnavailable:
		return http.StatusBadGateway
	case protocol.CodeForbidden:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// record adds the operator_action entry: who did what to which worker,
// and the code when it failed.
func (d *Dashboard) record(ctx context.Context, res actionResult, failed error) error {
	detail := map[string]any{"action": res.Action, "operator": res.Operator}
	if res.PermissionID != "" {
		detail["permission_id"] = res.PermissionID
	}
	if res.CommandID != "" {
		detail["command_id"] = res.CommandID
	}
	var ce *client.Error
	if errors.As(failed, &ce) {
		detail["code"] = ce.Code
	} else if failed != nil {
		detail["code"] = protocol.CodeInternalError
	}
	l := protocol.Lifecycle{WorkerID: res.WorkerID, Event: protocol.EventOperatorAction, Source: protocol.SourceOperator,
		Timestamp: time.Now().UTC(), RequestID: res.RequestID, Detail: detail}
	if err := l.Validate(); err != nil {
		return client.Errorf(protocol.CodeInvalidCommand, "record: %v", err)
	}
	doc, err := l.Encode()
	if err != nil {
		return client.Errorf(protocol.CodeInternalError, "record: %v", err)
	}
	// The record outlives a request cancelled once its action is done.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	err = rdb.New(d.Redis, d.Keys).AddEntry(rctx, d.Keys.Lifecycle(), doc)
	if err != nil {
		return client.Errorf(protocol.CodeUpstreamUnavailable, "record on %s: %v", d.Keys.Lifecycle(), err)
	}
	return nil
}

// inFlight returns where a worker's task goes: its request (the body's,
// else the one the worker runs) and its input stream.
func (d *Dashboard) inFlight(ctx context.Context, workerID, requestID string) (client.Sent, error) {
	h, found, err := rdb.New(d.Redis, d.Keys).LookupStatus(ctx, workerID, protocol.StatusFieldKind, protocol.StatusFieldRequestID)
	if err != nil {
		return client.Sent{}, client.Errorf(protocol.CodeUpstreamUnavailable, "worker %s: %v", workerID, err)
	}
	kind, running := h[0], h[1]
	if !found {
		return client.Sent{}, client.Errorf(protocol.CodeNotFound, "no worker %s", workerID)
	}
	if requestID == "" {
		requestID = running
	}
	if requestID == "" {
		return client.Sent{}, client.Errorf(protocol.CodeConflict, "worker %s has no task in flight", workerID)
	}
	k := protocol.Kind(kind)
	if k == "" {
		k = protocol.KindLongLived
	}
	return client.Sent{RequestID: requestID, WorkerID: workerID, Input: d.Keys.InputFor(k, workerID)}, nil
}

func (d *Dashboard) tasks() *client.Tasks {
	return &client.Tasks{Redis: d.Redis, Keys: d.Keys, Wait: d.Wait}
}

func (d *Dashboard) cancelTask(ctx context.Context, body ActionBody, res *actionResult) error {
	s, err := d.inFlight(ctx, res.WorkerID, body.RequestID)
	if err != nil {
		return err
	}
	res.RequestID = s.RequestID
	reason := body.Reason
	if reason == "" {
		reason = "cancelled by " + res.Operator + " from the dashboard"
	}
	c := protocol.NewCancel(s.RequestID, reason)
	if err := c.Validate(); err != nil {
		return client.Errorf(protocol.CodeInvalidCommand, "%v", err)
	}
	return d.tasks().Cancel(ctx, s, reason)
}

func (d *Dashboard) messageTask(ctx context.Context, body ActionBody, res *actionResult) error {
	s, err := d.inFlight(ctx, res.WorkerID, body.RequestID)
	if err != nil {
		return err
	}
	res.RequestID = s.RequestID
	return d.tasks().Message(ctx, s, body.Text)
}

func (d *Dashboard) answer(allow bool) actionFunc {
	return func(ctx context.Context, body ActionBody, res *actionResult) error {
		s, err := d.inFlight(ctx, res.WorkerID, body.RequestID)
		if err != nil {
			return err
		}
		res.RequestID, res.PermissionID = s.RequestID, body.PermissionID
		message := body.Message
		if !allow && message == "" {
			message = "denied by " + res.Operator
		}
		if err := protocol.NewPermissionReply(s.RequestID, body.PermissionID, allow, message).Validate(); err != nil {
			return client.Errorf(protocol.CodeInvalidCommand, "%v", err)
		}
		return d.tasks().Answer(ctx, s, body.PermissionID, allow, message)
	}
}

// command sends a pause, unpause or delete of the worker and waits for
// the manager's reply.
func (d *Dashboard) command(action protocol.Action) actionFunc {
	return func(ctx context.Context, _ ActionBody, res *actionResult) error {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		res.CommandID = "ops-" + hex.EncodeToString(b)
		c := &client.Commands{Redis: d.Redis, Keys: d.Keys, Timeout: d.commandTimeout(), Wait: d.Wait}
		_, err := c.Do(ctx, protocol.Command{ID: res.CommandID, Action: action, WorkerID: res.WorkerID})
		return err
	}
}

func (d *Dashboard) commandTimeout() time.Duration {
	if d.CommandTimeout > 0 {
		return d.CommandTimeout
	}
	return time.Minute
}
