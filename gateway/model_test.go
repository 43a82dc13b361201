package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/testkit"
)

// modelSeen is what a test model server saw of one request.
type modelSeen struct {
	method, uri, host string
	header            http.Header
	body              string
}

// startTLSModel serves a model API over TLS (httptest's certificate, for
// 127.0.0.1 and example.com) that records each request and answers with
// answer; it returns the server and what it saw.
func startTLSModel(t *testing.T, answer http.HandlerFunc) (*httptest.Server, func() []modelSeen) {
	t.Helper()
	var mu sync.Mutex
	var seen []modelSeen
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, modelSeen{r.Method, r.RequestURI, r.Host, r.Header.Clone(), string(b)})
		mu.Unlock()
		answer(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake of the test without the roots
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, func() []modelSeen {
		mu.Lock()
		defer mu.Unlock()
		return append([]modelSeen(nil), seen...)
	}
}

// modelClient is an HTTP client whose every connection is to sock.
func modelClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// modelPost posts a body to model.sock with the given headers and returns
// the answer's status and body.
func modelPost(t *testing.T, hc *http.Client, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://api.anthropic.com/v1/messages?beta=true", strings.NewReader(`{"model":"m"}`))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const workerToken = "agentvisor-worker-token-5f0c9e"

// model.sock forwards only the requests that carry the worker's token:
// without it, or with another, 403 (counted, the model sees nothing);
// with it, the request reaches the model over verified TLS, the token
// removed, everything else as sent. A PUT without a token keeps the
// worker's; the control API never shows it; a worker opened without one
// has every request refused.
func TestModelSocketWantsTheWorkersToken(t *testing.T) {
	model, seen := startTLSModel(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "model answer") })
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	_, c := startGatewayWith(t, Config{Dir: dir, Redis: r.Addr, Model: model.Listener.Addr().String(),
		UpstreamTLS: &tls.Config{RootCAs: rootsOf(model)}})
	ctx := context.Background()
	info, err := c.OpenSpec(ctx, WorkerSpec{WorkerID: "m", ModelToken: workerToken})
	if err != nil {
		t.Fatal(err)
	}
	if info.ModelSocket != sockOf(dir, "m", ModelSocket) {
		t.Fatalf("model socket %q", info.ModelSocket)
	}
	hc := modelClient(info.ModelSocket)
	for _, h := range []map[string]string{
		{"X-Api-Key": "sk-ant-agents-own-key"},
		{"X-Api-Key": "sk-ant-agents-own-key", ModelTokenHeader: "guessed"},
		{ModelTokenHeader: workerToken + "x"},
	} {
		if status, body := modelPost(t, hc, h); status != http.StatusForbidden || !strings.Contains(body, "permission_error") {
			t.Fatalf("%v: got %d %s, want 403", h, status, body)
		}
	}
	if s := seen(); len(s) != 0 {
		t.Fatalf("the model saw refused requests: %+v", s)
	}
	if st, _ := c.Stats(ctx); st["m"].ModelRefused != 3 || st["m"].ModelRequests != 0 {
		t.Fatalf("stats %+v, want 3 refused", st["m"])
	}

	// The PUT of an open worker without a token (a new allowlist) keeps it.
	if _, err := c.OpenSpec(ctx, WorkerSpec{WorkerID: "m", Allow: []string{"example.com"}}); err != nil {
		t.Fatal(err)
	}
	status, body := modelPost(t, hc, map[string]string{ModelTokenHeader: workerToken, "X-Api-Key": "sk-real", "Anthropic-Version": "2023-06-01"})
	if status != http.StatusOK || body != "model answer" {
		t.Fatalf("with the token: %d %q", status, body)
	}
	s := seen()
	if len(s) != 1 {
		t.Fatalf("the model saw %d requests, want 1", len(s))
	}
	got := s[0]
	if got.method != http.MethodPost || got.uri != "/v1/messages?beta=true" || got.body != `{"model":"m"}` ||
		got.header.Get("X-Api-Key") != "sk-real" || got.header.Get("Anthropic-Version") != "2023-06-01" {
		t.Fatalf("the model saw %+v", got)
	}
	if got.host != model.Listener.Addr().String() {
		t.Fatalf("the model saw Host %q, want its own %q", got.host, model.Listener.Addr().String())
	}
	if _, ok := got.header[ModelTokenHeader]; ok {
		t.Fatalf("the token reached the model: %v", got.header)
	}
	if st, _ := c.Stats(ctx); st["m"].ModelRequests != 1 || st["m"].ModelRefused != 3 {
		t.Fatalf("stats %+v", st["m"])
	}

	// The control API never shows the token; worker.json (root's, 0600) keeps it for a restart.
	raw, _ := json.Marshal(info)
	gi, _ := c.Worker(ctx, "m")
	shown, _ := json.Marshal(gi)
	if strings.Contains(string(raw)+string(shown), workerToken) {
		t.Fatalf("the control API shows the token: %s %s", raw, shown)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "m", WorkerFile)); !strings.Contains(string(b), workerToken) {
		t.Fatalf("worker.json lost the token: %s", b)
	}

	// A worker opened without a token: nothing passes.
	if err := c.Open(ctx, "none", nil); err != nil {
		t.Fatal(err)
	}
	if status, _ := modelPost(t, modelClient(sockOf(dir, "none", ModelSocket)), map[string]string{ModelTokenHeader: ""}); status != http.StatusForbidden {
		t.Fatalf("a worker without a token: %d, want 403", status)
	}
}

// A gateway restarted on its directory takes the token back from
// worker.json.
func TestModelTokenSurvivesARestart(t *testing.T) {
	model, _ := startTLSModel(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	cfg := Config{Dir: dir, Redis: r.Addr, Model: "https://" + model.Listener.Addr().String(), UpstreamTLS: &tls.Config{RootCAs: rootsOf(model)}}
	g, c := startGatewayWith(t, cfg)
	if _, err := c.OpenSpec(context.Background(), WorkerSpec{WorkerID: "m", ModelToken: workerToken}); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	startGatewayWith(t, cfg)
	hc := modelClient(sockOf(dir, "m", ModelSocket))
	if status, _ := modelPost(t, hc, map[string]string{ModelTokenHeader: workerToken}); status != http.StatusOK {
		t.Fatalf("after a restart, with the token: %d", status)
	}
	if status, _ := modelPost(t, hc, nil); status != http.StatusForbidden {
		t.Fatalf("after a restart, without the token: %d", status)
	}
}

// An answer streams through model.sock as the model writes it: the first
// server-sent event reaches the client while the model still holds the
// rest back.
func TestModelSocketStreams(t *testing.T) {
	release := make(chan struct{})
	model, _ := startTLSModel(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "event: message_stop\ndata: {}\n\n")
	})
	defer close(release)
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	_, c := startGatewayWith(t, Config{Dir: dir, Redis: r.Addr, Model: model.Listener.Addr().String(),
		UpstreamTLS: &tls.Config{RootCAs: rootsOf(model)}})
	if _, err := c.OpenSpec(context.Background(), WorkerSpec{WorkerID: "m", ModelToken: workerToken}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://model/v1/messages", strings.NewReader(`{"stream":true}`))
	req.Header.Set(ModelTokenHeader, workerToken)
	resp, err := modelClient(sockOf(dir, "m", ModelSocket)).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if line != "event: message_start\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not come through while the model held the rest: the answer is buffered")
	}
}

// The gateway verifies the model's certificate: one it has no root for
// (httptest's, with the system's roots) is a 502, and no request reaches
// the server.
func TestModelSocketVerifiesTheModelsCertificate(t *testing.T) {
	model, seen := startTLSModel(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "should not be reached") })
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	_, c := startGatewayWith(t, Config{Dir: dir, Redis: r.Addr, Model: model.Listener.Addr().String()})
	if _, err := c.OpenSpec(context.Background(), WorkerSpec{WorkerID: "m", ModelToken: workerToken}); err != nil {
		t.Fatal(err)
	}
	status, body := modelPost(t, modelClient(sockOf(dir, "m", ModelSocket)), map[string]string{ModelTokenHeader: workerToken})
	if status != http.StatusBadGateway || !strings.Contains(body, "unreachable") {
		t.Fatalf("an unverified model: %d %s, want 502", status, body)
	}
	if s := seen(); len(s) != 0 {
		t.Fatalf("the model saw %+v", s)
	}
	if st, _ := c.Stats(context.Background()); st["m"].DialErrors != 1 {
		t.Fatalf("stats %+v, want a dial error", st["m"])
	}
}

// Config.Model: host:port or an http(s) URL of scheme and host; no Model,
// no model.sock.
func TestModelConfig(t *testing.T) {
	for in, want := range map[string]string{
		"api.anthropic.com:443":     "https://api.anthropic.com:443",
		"https://api.anthropic.com": "https://api.anthropic.com",
		"http://127.0.0.1:8080/":    "http://127.0.0.1:8080",
	} {
		u, err := ParseModel(in)
		if err != nil || u.String() != want {
			t.Errorf("%q: %v %v, want %s", in, u, err, want)
		}
	}
	for _, bad := range []string{"api.anthropic.com", "ftp://x:1", "https://x:1/v1", "https://user:pw@x:1", "https://x:1?q=1"} {
		if _, err := New(Config{Dir: t.TempDir(), Redis: "127.0.0.1:1", Model: bad}); err == nil {
			t.Errorf("Model %q accepted", bad)
		}
	}
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	_, c := startGateway(t, dir, r.Addr, "")
	if err := c.Open(context.Background(), "m", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sockOf(dir, "m", ModelSocket)); !os.IsNotExist(err) {
		t.Fatalf("model.sock without a Model: %v", err)
	}
}

// rootsOf is a pool of srv's certificate alone.
func rootsOf(srv *httptest.Server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
}
