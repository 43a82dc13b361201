package apiproxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/stubmodel"
)

const realKey = "sk-ant-real-key-0123456789"

func startStub(t testing.TB) *stubmodel.Server {
	t.Helper()
	stub, err := stubmodel.Start(stubmodel.Script{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	stub.SetAPIKey(realKey)
	return stub
}

func startProxy(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func post(t *testing.T, url string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages?beta=true", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestTokenIsReplacedByTheRealKey(t *testing.T) {
	stub := startStub(t)
	tests := []struct {
		name   string
		header func(token string) map[string]string
	}{
		{"x-api-key", func(tok string) map[string]string { return map[string]string{"X-Api-Key": tok} }},
		{"bearer", func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub.Reset()
			p := startProxy(t, Config{Upstream: stub.URL, APIKey: realKey})
			resp, body := post(t, p.URL, tt.header(p.Token), streamBody)
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "event: message_stop") {
				t.Fatalf("through the proxy: %s\n%s", resp.Status, body)
			}
			reqs := stub.Requests()
			if len(reqs) != 1 || !reqs[0].KeyOK || reqs[0].Path != "/v1/messages" {
				t.Fatalf("the stub saw %+v, want one request with the real key", reqs)
			}
			for name, values := range reqs[0].Header {
				for _, v := range values {
					if strings.Contains(v, p.Token) {
						t.Errorf("the agent's token reached the upstream in %s", name)
					}
				}
			}
		})
	}
}

func TestWrongTokenGets401(t *testing.T) {
	stub := startStub(t)
	p := startProxy(t, Config{Upstream: stub.URL, APIKey: realKey})
	tests := []struct {
		name   string
		header map[string]string
	}{
		{"no credential", nil},
		{"another token", map[string]string{"X-Api-Key": NewToken()}},
		{"the real key itself", map[string]string{"X-Api-Key": realKey}},
		{"a prefix of the token", map[string]string{"Authorization": "Bearer " + p.Token[:20]}},
		{"bearer without the scheme", map[string]string{"Authorization": p.Token}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, p.URL, tt.header, streamBody)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "authentication_error") {
				t.Fatalf("%s: %s", resp.Status, body)
			}
		})
	}
	if n := len(stub.Requests()) + len(stub.OtherRequests()); n != 0 {
		t.Fatalf("%d refused requests reached the upstream", n)
	}
}

func TestAuthTokenUpstream(t *testing.T) {
	stub := startStub(t)
	p := startProxy(t, Config{Upstream: stub.URL, AuthToken: realKey})
	resp, body := post(t, p.URL, map[string]string{"X-Api-Key": p.Token}, streamBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", resp.Status, body)
	}
	if reqs := stub.Requests(); len(reqs) != 1 || !reqs[0].KeyOK || reqs[0].Header.Get("X-Api-Key") != "" {
		t.Fatalf("want the token as the only credential, a bearer: %+v", reqs)
	}
}

// TestEventsAreNotBuffered checks that each server-sent event reaches the
// agent as the upstream flushes it, not when the answer ends. The stub
// model writes a whole answer at once, so the upstream here is a handler
// that waits for the client to read the first event before it writes the
// second.
func TestEventsAreNotBuffered(t *testing.T) {
	firstRead := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: ping\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-firstRead:
		case <-time.After(5 * time.Second):
		}
		fmt.Fprint(w, "event: message_stop\ndata: {}\n\n")
	}))
	defer up.Close()
	p := startProxy(t, Config{Upstream: up.URL, APIKey: realKey})
	req, _ := http.NewRequest(http.MethodPost, p.URL+"/v1/messages", strings.NewReader(streamBody))
	req.Header.Set("X-Api-Key", p.Token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: ping\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the first event took %s: buffered by the proxy", d)
	}
	close(firstRead)
}

func TestUpstreamUnreachable(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	addr := up.URL
	up.Close()
	p := startProxy(t, Config{Upstream: addr, APIKey: realKey})
	resp, body := post(t, p.URL, map[string]string{"X-Api-Key": p.Token}, streamBody)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "api_error") {
		t.Fatalf("%s: %s", resp.Status, body)
	}
}

func TestStartRefuses(t *testing.T) {
	tests := []struct{ name, addr, upstream string }{
		{"not loopback", "0.0.0.0:0", "http://127.0.0.1:1"},
		{"not http", "127.0.0.1:0", "ftp://example.com"},
		{"no host", "127.0.0.1:0", "https://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := Start(tt.addr, Config{Upstream: tt.upstream}); err == nil {
				p.Close()
				t.Fatal("started")
			}
		})
	}
}
