package gateway

// The egress proxy against a hostile container: bounds, panics, and
// answers that try to pass for the gateway's.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/testkit"
)

// What a hostile container sends the egress proxy does not hold or crash
// the gateway: a header that never ends is cut at the timeout, a header
// too big is refused, garbage is 400, and the proxy goes on serving.
func TestEgressHostile(t *testing.T) {
	old := egressHeaderTimeout
	egressHeaderTimeout = 300 * time.Millisecond
	defer func() { egressHeaderTimeout = old }()
	e := newEgressEnv(t)
	e.open(t, "w1", "git.example.test")
	sock := e.sock("w1")

	slow, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	start := time.Now()
	_, _ = io.WriteString(slow, "CONNECT git.example.test:443 HTTP/1.1\r\nX-Slow: ")
	_ = slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	go func() {
		for range 20 {
			if _, err := io.WriteString(slow, "a"); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if _, err := io.ReadAll(slow); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("slow header: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a slow header held a connection %v", d)
	}

	resp, _, _ := rawRequest(t, sock, "CONNECT git.example.test:443 HTTP/1.1\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 64 KiB header: %s", resp.Status)
	}
	junk, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	_, _ = junk.Write([]byte("\x16\x03\x01\x00\xff garbage\r\n\r\n"))
	_ = junk.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(junk)
	if !strings.HasPrefix(string(b), "HTTP/1.1 400") {
		t.Fatalf("garbage answered %q", b)
	}
	if resp, _, _ := connect(t, sock, "git.example.test:443"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the hostile connections: %s", resp.Status)
	}
	// Closing the worker cuts an open tunnel.
	_, _, tunnel := connect(t, sock, "git.example.test:443")
	if err := e.c.Close(context.Background(), "w1"); err != nil {
		t.Fatal(err)
	}
	_ = tunnel.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tunnel.r.ReadByte(); err == nil || os.IsTimeout(err) {
		t.Fatalf("a tunnel of a closed worker: %v", err)
	}
}

// MaxConns bounds egress connections like the others.
func TestEgressMaxConns(t *testing.T) {
	e := newEgressEnv(t)
	if err := e.g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.maxConns = 2
	e.start(t, nil)
	e.open(t, "w1", "git.example.test")
	for range 2 {
		if resp, _, _ := connect(t, e.sock("w1"), "git.example.test:443"); resp.StatusCode != http.StatusOK {
			t.Fatal(resp.Status)
		}
	}
	c, err := net.Dial("unix", e.sock("w1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("a third connection read %d bytes", n)
	}
	if st := e.stats(t, "w1"); st.Refused != 1 || st.Open != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// A panic while serving one egress request (a bug reached by what the
// container sent) closes that connection only: the gateway, the worker
// and its other connections go on.
func TestEgressPanicClosesOnlyThatConnection(t *testing.T) {
	e := newEgressEnv(t)
	if err := e.g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Dir: e.dir, Redis: "127.0.0.1:1", DialEgress: e.dial,
		Resolver: func(ctx context.Context, host string) ([]string, error) {
			if host == "panic.example.test" {
				panic("a bug in name resolution")
			}
			return e.resolve(ctx, host)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	e.open(t, "w1", "git.example.test", "panic.example.test")
	_, _, tunnel := connect(t, e.sock("w1"), "git.example.test:443")
	c, err := net.Dial("unix", e.sock("w1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "CONNECT panic.example.test:443 HTTP/1.1\r\nHost: x\r\n\r\n")
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the panicking request: %q %v", b, err)
	}
	tc := tls.Client(tunnel, &tls.Config{RootCAs: e.pool, ServerName: "example.com"})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("a tunnel open beside the panic: %v", err)
	}
	if resp, _, _ := connect(t, e.sock("w1"), "git.example.test:443"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the panic: %s", resp.Status)
	}
	testkit.Eventually(t, "the panicking connection released", 5*time.Second, func() bool {
		return g.Stats()["w1"].Open == 2
	})
}

// A name that resolves to private, carrier-grade NAT or unique-local
// addresses (an internal host, a cloud's metadata service) is refused like
// one that resolves to loopback: only an IP literal on the list reaches
// such an address.
func TestEgressNameToPrivateAddressesRefused(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "w1", "private.example.test")
	resp, body, _ := connect(t, e.sock("w1"), "private.example.test:443")
	checkRefused(t, "a name resolving to private addresses", resp, body, "private.example.test:443")
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.dialed) != 0 {
		t.Fatalf("the gateway dialled %v", e.dialed)
	}
}

// An upstream's own 403 that names a host in the refusal header does not
// pass for the gateway's refusal: the header is dropped on the way back.
func TestEgressUpstreamCannotForgeARefusal(t *testing.T) {
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(RefusedHeader, "evil.example.test:443")
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer forger.Close()
	e := newEgressEnv(t)
	_, port, _ := net.SplitHostPort(forger.Listener.Addr().String())
	e.open(t, "w1", "127.0.0.1:"+port)
	resp, _, _ := rawRequest(t, e.sock("w1"), "GET http://127.0.0.1:"+port+"/ HTTP/1.1\r\nHost: 127.0.0.1:"+port+"\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(RefusedHeader) != "" {
		t.Fatalf("the upstream's 403: %s, %s=%q", resp.Status, RefusedHeader, resp.Header.Get(RefusedHeader))
	}
}
