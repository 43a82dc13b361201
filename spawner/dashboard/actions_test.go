package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/dashboard"
	"github.com/agentvisor/agentvisor/testkit"
)

// actionEnv is a dashboard behind the operator token over a real Redis,
// with one worker running task r-1, and a manager stand-in that answers
// every command ok.
type actionEnv struct {
	t      *testing.T
	rc     *redis.Client
	keys   protocol.Keys
	srv    *httptest.Server
	token  string
	cookie *http.Cookie
	csrf   string
}

const actWorker, actTask = "w-1", "r-1"

func newActionEnv(t *testing.T) *actionEnv {
	rc := testkit.NewRedisClient(t)
	keys := protocol.Keys{Prefix: "acttest"}
	ctx := context.Background()
	rc.SAdd(ctx, keys.Workers(), actWorker)
	rc.HSet(ctx, keys.Status(actWorker), protocol.StatusFieldKind, string(protocol.KindLongLived),
		protocol.StatusFieldRequestID, actTask, protocol.StatusFieldProjectID, "shop")
	// A manager's presence, as answerCommands plays its part: the
	// dashboard's commands are refused NO_MANAGER without one.
	rc.HSet(ctx, keys.ManagerState("m-test"), "id", "m-test")
	rc.SAdd(ctx, keys.Managers(), "m-test")
	e := &actionEnv{t: t, rc: rc, keys: keys, token: ops.NewToken()}
	d := &dashboard.Dashboard{Redis: rc, Keys: keys, CommandTimeout: 5 * time.Second}
	e.srv = httptest.NewServer(ops.RequireToken(e.token, d.Handler()))
	t.Cleanup(e.srv.Close)
	go e.answerCommands(t.Context())

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(e.srv.URL + "/login?token=" + e.token + "&operator=alice")
	if err != nil || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %v", err)
	}
	e.cookie = resp.Cookies()[0]
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/session", nil)
	req.AddCookie(e.cookie)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Operator, CSRF string }
	_ = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if s.Operator != "alice" || len(s.CSRF) != 64 {
		t.Fatalf("session: %+v", s)
	}
	e.csrf = s.CSRF
	return e
}

// answerCommands replies ok to each command, as a manager would.
func (e *actionEnv) answerCommands(ctx context.Context) {
	last := "0-0"
	for ctx.Err() == nil {
		res, err := e.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{e.keys.Commands(), last}, Block: 200 * time.Millisecond}).Result()
		if err != nil {
			continue
		}
		for _, m := range res[0].Messages {
			last = m.ID
			data, _ := protocol.EntryData(m.Values)
			cmd, err := protocol.DecodeCommand(data)
			if err != nil {
				continue
			}
			doc, _ := protocol.Reply{CommandID: cmd.ID, Action: cmd.Action, OK: true, WorkerID: cmd.WorkerID, Timestamp: time.Now()}.Encode()
			e.rc.XAdd(ctx, &redis.XAddArgs{Stream: cmd.ReplyTo, Values: protocol.Values(doc)})
		}
	}
}

// post sends an action; set adds headers (credential, origin, CSRF).
func (e *actionEnv) post(method, path, body string, set ...func(*http.Request)) (int, string) {
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, s := range set {
		s(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *actionEnv) withCookie(r *http.Request) { r.AddCookie(e.cookie) }
func (e *actionEnv) withCSRF(r *http.Request)   { r.Header.Set(dashboard.CSRFHeader, e.csrf) }
func sameOriginOf(srv *httptest.Server) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Origin", srv.URL); r.Header.Set("Sec-Fetch-Site", "same-origin") }
}

// docs returns the documents of a stream.
func (e *actionEnv) docs(stream string) [][]byte {
	msgs, err := e.rc.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var out [][]byte
	for _, m := range msgs {
		d, _ := protocol.EntryData(m.Values)
		out = append(out, d)
	}
	return out
}

// counts is how many entries the streams an action writes hold.
func (e *actionEnv) counts() [3]int {
	return [3]int{len(e.docs(e.keys.Input(actWorker))), len(e.docs(e.keys.Commands())), len(e.docs(e.keys.Lifecycle()))}
}

// lastAction decodes the last lifecycle entry, an operator_action.
func (e *actionEnv) lastAction() protocol.Lifecycle {
	docs := e.docs(e.keys.Lifecycle())
	if len(docs) == 0 {
		e.t.Fatal("no lifecycle entry")
	}
	l, err := protocol.DecodeLifecycle(docs[len(docs)-1])
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// Every action: refused without the credential (401), with a GET (405),
// without the session's CSRF token, or from another origin or site (403),
// writing nothing; done with them, it writes the document any consumer
// writes (on the worker's input, or a command) and records who did it.
func TestDashboardActions(t *testing.T) {
	e := newActionEnv(t)
	same := sameOriginOf(e.srv)
	for _, c := range []struct {
		action, body string
		check        func(t *testing.T, doc []byte) string // returns the lifecycle's permission or command id
	}{
		{"cancel", `{"reason":"wrong branch"}`, func(t *testing.T, doc []byte) string {
			c, err := protocol.DecodeCancel(doc)
			if err != nil || c.RequestID != actTask || c.Reason != "wrong branch" {
				t.Errorf("cancel written: %+v %v", c, err)
			}
			return ""
		}},
		{"message", `{"text":"use the v2 API"}`, func(t *testing.T, doc []byte) string {
			m, err := protocol.DecodeMessage(doc)
			if err != nil || m.RequestID != actTask || m.Text != "use the v2 API" {
				t.Errorf("message written: %+v %v", m, err)
			}
			return ""
		}},
		{"allow", `{"request_id":"r-1","permission_id":"perm-1"}`, func(t *testing.T, doc []byte) string {
			r, err := protocol.DecodePermissionReply(doc)
			if err != nil || r.RequestID != actTask || r.PermissionID != "perm-1" || !r.Allow {
				t.Errorf("allow written: %+v %v", r, err)
			}
			return r.PermissionID
		}},
		{"deny", `{"permission_id":"perm-2","message":"not here"}`, func(t *testing.T, doc []byte) string {
			r, err := protocol.DecodePermissionReply(doc)
			if err != nil || r.PermissionID != "perm-2" || r.Allow || r.Message != "not here" {
				t.Errorf("deny written: %+v %v", r, err)
			}
			return r.PermissionID
		}},
		{"pause", ``, commandCheck(protocol.ActionPause)},
		{"resume", ``, commandCheck(protocol.ActionUnpause)},
		{"delete", ``, commandCheck(protocol.ActionDelete)},
	} {
		t.Run(c.action, func(t *testing.T) {
			path := "/workers/" + actWorker + "/" + c.action
			before := e.counts()
			for _, r := range []struct {
				name   string
				method string
				set    []func(*http.Request)
				want   int
			}{
				{"no credential", http.MethodPost, []func(*http.Request){same}, http.StatusUnauthorized},
				{"a GET", http.MethodGet, []func(*http.Request){e.withCookie, e.withCSRF, same}, http.StatusMethodNotAllowed},
				{"no CSRF token", http.MethodPost, []func(*http.Request){e.withCookie, same}, http.StatusForbidden},
				{"a wrong CSRF token", http.MethodPost, []func(*http.Request){e.withCookie, same, func(r *http.Request) { r.Header.Set(dashboard.CSRFHeader, strings.Repeat("0", 64)) }}, http.StatusForbidden},
				{"another origin", http.MethodPost, []func(*http.Request){e.withCookie, e.withCSRF, func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }}, http.StatusForbidden},
				{"another site", http.MethodPost, []func(*http.Request){e.withCookie, e.withCSRF, func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }}, http.StatusForbidden},
				{"an origin of another port", http.MethodPost, []func(*http.Request){e.withCookie, e.withCSRF, func(r *http.Request) { r.Header.Set("Origin", "http://127.0.0.1:1") }}, http.StatusForbidden},
			} {
				if code, body := e.post(r.method, path, c.body, r.set...); code != r.want {
					t.Errorf("%s: %d %s, want %d", r.name, code, body, r.want)
				}
			}
			if after := e.counts(); after != before {
				t.Fatalf("refused requests wrote: %v → %v", before, after)
			}
			code, body := e.post(http.MethodPost, path, c.body, e.withCookie, e.withCSRF, same)
			if code != http.StatusOK {
				t.Fatalf("the action: %d %s", code, body)
			}
			stream := e.keys.Input(actWorker)
			if strings.HasPrefix(c.action, "pause") || c.action == "resume" || c.action == "delete" {
				stream = e.keys.Commands()
			}
			docs := e.docs(stream)
			id := c.check(t, docs[len(docs)-1])
			l := e.lastAction()
			if l.Event != protocol.EventOperatorAction || l.Source != protocol.SourceOperator || l.WorkerID != actWorker ||
				l.Detail["action"] != c.action || l.Detail["operator"] != "alice" {
				t.Errorf("recorded: %+v", l)
			}
			if got, _ := l.Detail["permission_id"].(string); id != "" && got != id && l.Detail["command_id"] != id {
				t.Errorf("recorded %+v, want the id %s", l.Detail, id)
			}
			if after := e.counts(); after[2] != before[2]+1 {
				t.Errorf("lifecycle entries %d → %d, want one more", before[2], after[2])
			}
		})
	}
}

func commandCheck(action protocol.Action) func(t *testing.T, doc []byte) string {
	return func(t *testing.T, doc []byte) string {
		c, err := protocol.DecodeCommand(doc)
		if err != nil || c.Action != action || c.WorkerID != actWorker || !strings.HasPrefix(c.ID, "ops-") {
			t.Errorf("command written: %+v %v", c, err)
		}
		return c.ID
	}
}

// A script's bearer token needs no CSRF token and acts under the name
// it gives; bad input is refused with a stable code and recorded nowhere.
func TestDashboardActionsByBearer(t *testing.T) {
	e := newActionEnv(t)
	bearer := func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+e.token)
		r.Header.Set(ops.OperatorHeader, "deploy-bot")
	}
	if code, body := e.post(http.MethodPost, "/workers/w-1/cancel", "", bearer); code != http.StatusOK {
		t.Fatalf("cancel by bearer: %d %s", code, body)
	}
	if l := e.lastAction(); l.Detail["operator"] != "deploy-bot" || l.RequestID != actTask {
		t.Errorf("recorded %+v", l)
	}
	before := e.counts()
	for _, c := range []struct {
		name, path, body string
		want             int
		code             protocol.Code
	}{
		{"no such worker", "/workers/w-none/cancel", "", http.StatusNotFound, protocol.CodeNotFound},
		{"an empty message", "/workers/w-1/message", `{"text":""}`, http.StatusBadRequest, protocol.CodeInvalidCommand},
		{"an unknown field", "/workers/w-1/cancel", `{"request":"x"}`, http.StatusBadRequest, protocol.CodeInvalidCommand},
		{"no permission id", "/workers/w-1/allow", `{}`, http.StatusBadRequest, protocol.CodeInvalidCommand},
		{"a bad worker id", "/workers/a%20b/pause", "", http.StatusBadRequest, protocol.CodeInvalidCommand},
	} {
		code, body := e.post(http.MethodPost, c.path, c.body, bearer)
		if code != c.want || !strings.Contains(body, string(c.code)) {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, body, c.want, c.code)
		}
	}
	if after := e.counts(); after[0] != before[0] || after[1] != before[1] {
		t.Errorf("refused requests wrote: %v → %v", before, after)
	}
}
