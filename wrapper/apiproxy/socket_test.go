package apiproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/stubmodel"
)

const workerToken = "agentvisor-worker-token-test-7c1d"

// tlsStub serves stub over TLS on loopback (httptest's certificate) and
// returns its URL and a TLS config that trusts it.
func tlsStub(t testing.TB, stub *stubmodel.Server) (string, *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(stub)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv.URL, &tls.Config{RootCAs: pool}
}

// startGateway serves a real gateway whose model is model (host:port,
// HTTPS, trusted by roots), with worker "w" of token open; it returns the
// gateway and the worker's model.sock.
func startGateway(t testing.TB, model string, roots *tls.Config, token string) (*gateway.Gateway, string) {
	t.Helper()
	dir := gatewaytest.Dir(t)
	g := gatewaytest.Start(t, gateway.Config{Dir: dir, Redis: "127.0.0.1:1", Model: model, UpstreamTLS: roots})
	info, err := gateway.NewClient(dir).OpenSpec(context.Background(), gateway.WorkerSpec{WorkerID: "w", ModelToken: token})
	if err != nil {
		t.Fatal(err)
	}
	return g, info.ModelSocket
}

// With an upstream socket (a sealed worker's model.sock) every model call
// goes through the gateway, even with an HTTP proxy in the environment:
// the proxy sends it plain HTTP with the worker's token, the gateway
// forwards it over TLS; the model sees the real key and never the token,
// and the answer streams back whole.
func TestUpstreamThroughGateway(t *testing.T) {
	stub := startStub(t)
	url, roots := tlsStub(t, stub)
	g, sock := startGateway(t, strings.TrimPrefix(url, "https://"), roots, workerToken)
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1") // nothing listens there: a call through it fails
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	// The upstream's name never resolves: only the socket is dialled.
	p := startProxy(t, Config{Upstream: "https://model.invalid", APIKey: realKey, UpstreamSocket: sock, UpstreamToken: workerToken})
	resp, body := post(t, p.URL, map[string]string{"X-Api-Key": p.Token, gateway.ModelTokenHeader: "the agent's guess"}, streamBody)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "event: message_stop") {
		t.Fatalf("through the gateway: %s\n%s", resp.Status, body)
	}
	reqs := stub.Requests()
	if len(reqs) != 1 || !reqs[0].KeyOK || reqs[0].Path != "/v1/messages" {
		t.Fatalf("the stub saw %+v, want one request with the real key", reqs)
	}
	if v := reqs[0].Header.Values(gateway.ModelTokenHeader); len(v) != 0 {
		t.Fatalf("the model saw the token header: %v", v)
	}
	if st := g.Stats()["w"]; st.ModelRequests != 1 || st.ModelRefused != 0 {
		t.Fatalf("gateway stats %+v", st)
	}
}

// A proxy with another token than the worker's is refused by the gateway
// (403, which the wrapper sees as an upstream error); one without a
// token does not start.
func TestUpstreamSocketWantsTheToken(t *testing.T) {
	stub := startStub(t)
	url, roots := tlsStub(t, stub)
	g, sock := startGateway(t, strings.TrimPrefix(url, "https://"), roots, workerToken)
	var errs atomic.Int32
	p := startProxy(t, Config{Upstream: "https://model.invalid", APIKey: realKey, UpstreamSocket: sock, UpstreamToken: "not-the-workers",
		OnUpstreamError: func(status int, _ http.Header) {
			if status == http.StatusForbidden {
				errs.Add(1)
			}
		}})
	if resp, body := post(t, p.URL, map[string]string{"X-Api-Key": p.Token}, streamBody); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a wrong token: %s %s, want 403", resp.Status, body)
	}
	if len(stub.Requests()) != 0 || errs.Load() != 1 || g.Stats()["w"].ModelRefused != 1 {
		t.Fatalf("stub saw %d, upstream errors %d, stats %+v", len(stub.Requests()), errs.Load(), g.Stats()["w"])
	}
	if _, err := Start("127.0.0.1:0", Config{Upstream: url, UpstreamSocket: sock}); err == nil {
		t.Fatal("a proxy with a socket and no token started")
	}
}
