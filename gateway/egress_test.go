package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/testkit"
)

// fakeAddr is what the test network resolves every name to (TEST-NET-1,
// never dialled: the test dialer maps it to loopback test servers).
const fakeAddr = "192.0.2.1"

// egressEnv is a gateway whose egress reaches two loopback test servers
// through a test network: every name resolves to fakeAddr, except
// rebind.example.test (127.0.0.1), metadata.example.test
// (169.254.169.254) and nx.example.test (no such host); fakeAddr:80 and
// :8080 dial the plain HTTP server, any other port of it the TLS server;
// 127.0.0.1 is dialled as it is; nothing else is dialled at all.
type egressEnv struct {
	dir  string
	g    *Gateway
	c    *Client
	tls  *httptest.Server // answers "tls saw {host} {path}"
	web  *httptest.Server // answers "web saw {host} {path}" and the headers it got
	pool *x509.CertPool
	log  *syncBuf

	maxConns int // Config.MaxConns of the next start

	mu     sync.Mutex
	dialed []string // what the gateway dialled, as the dialer was asked
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newEgressEnv(t *testing.T, defaults ...string) *egressEnv {
	t.Helper()
	e := &egressEnv{dir: shortDir(t), log: &syncBuf{}}
	e.tls = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls saw %s %s", r.Host, r.URL.Path)
	}))
	// Tunnels the tests open and close without a handshake are no news.
	e.tls.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.tls.StartTLS()
	t.Cleanup(e.tls.Close)
	e.web = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var hs []string
		for k := range r.Header {
			hs = append(hs, k)
		}
		slices.Sort(hs)
		w.Header().Set("Proxy-Agent", "upstream")
		w.Header().Set("X-Upstream", "yes")
		fmt.Fprintf(w, "web saw %s %s %s", r.Host, r.URL.Path, strings.Join(hs, ","))
	}))
	t.Cleanup(e.web.Close)
	e.pool = x509.NewCertPool()
	e.pool.AddCert(e.tls.Certificate())
	e.start(t, defaults)
	return e
}

// start serves a gateway on e.dir, stopped when the test ends.
func (e *egressEnv) start(t *testing.T, defaults []string) {
	t.Helper()
	e.g, e.c = startGatewayWith(t, Config{Dir: e.dir, Redis: "127.0.0.1:1", Allow: defaults, MaxConns: e.maxConns,
		Log:        slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Resolver:   e.resolve,
		DialEgress: e.dial,
	})
}

func (e *egressEnv) resolve(_ context.Context, host string) ([]string, error) {
	switch host {
	case "rebind.example.test":
		return []string{"127.0.0.1"}, nil
	case "metadata.example.test":
		return []string{"169.254.169.254", "::1"}, nil
	case "nx.example.test":
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	case "private.example.test":
		return []string{"10.0.0.5", "100.100.100.200", "fd00:ec2::254"}, nil
	}
	return []string{fakeAddr}, nil
}

func (e *egressEnv) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	e.mu.Lock()
	e.dialed = append(e.dialed, addr)
	e.mu.Unlock()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	switch {
	case host == fakeAddr && (port == "80" || port == "8080"):
		return d.DialContext(ctx, network, e.web.Listener.Addr().String())
	case host == fakeAddr:
		return d.DialContext(ctx, network, e.tls.Listener.Addr().String())
	case host == "127.0.0.1":
		return d.DialContext(ctx, network, addr)
	}
	return nil, fmt.Errorf("test network: no route to %s", addr)
}

func (e *egressEnv) sock(id string) string { return sockOf(e.dir, id, EgressSocket) }

func (e *egressEnv) open(t *testing.T, id string, allow ...string) {
	t.Helper()
	if err := e.c.Open(context.Background(), id, allow); err != nil {
		t.Fatal(err)
	}
}

func (e *egressEnv) stats(t *testing.T, id string) WorkerStats {
	t.Helper()
	st, err := e.c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st[id]
}

// proxyResult is what the proxy answered a CONNECT of an http.Client.
type proxyResult struct {
	mu      sync.Mutex
	status  int
	refused string
}

// client is an http.Client in the container: its proxy is egress.sock of
// worker id, and it trusts the TLS test server (named example.com in its
// certificate). keepAlive keeps its connections (and tunnels) open.
func (e *egressEnv) client(id string, keepAlive bool) (*http.Client, *proxyResult) {
	sock := e.sock(id)
	res := &proxyResult{}
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.sock"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		TLSClientConfig:   &tls.Config{RootCAs: e.pool, ServerName: "example.com"},
		DisableKeepAlives: !keepAlive,
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
			res.mu.Lock()
			res.status, res.refused = resp.StatusCode, resp.Header.Get(RefusedHeader)
			res.mu.Unlock()
			return nil
		},
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, res
}

// get GETs u with hc and returns the body of a 200.
func get(hc *http.Client, u string) (string, error) {
	resp, err := hc.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}

// rawRequest sends req (a request head) on a new connection to sock and
// returns the answer, its body read unless it is a 200 to a CONNECT, and
// the connection (closed when the test ends).
func rawRequest(t *testing.T, sock, req string) (*http.Response, string, *bufConn) {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	var body string
	if !(method == http.MethodConnect && resp.StatusCode == http.StatusOK) {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	return resp, body, &bufConn{c, br}
}

func connect(t *testing.T, sock, authority string) (*http.Response, string, *bufConn) {
	t.Helper()
	return rawRequest(t, sock, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority))
}

// checkRefused checks a 403 of the egress proxy for hostPort.
func checkRefused(t *testing.T, what string, resp *http.Response, body, hostPort string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(hostPort)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(RefusedHeader) != hostPort ||
		!strings.Contains(body, "host "+host+" port "+port+" ") {
		t.Errorf("%s: %s %s=%q %q, want 403 refusing %s", what, resp.Status, RefusedHeader, resp.Header.Get(RefusedHeader), body, hostPort)
	}
}

// An allowed CONNECT works end to end: an https:// GET of an http.Client
// whose proxy is egress.sock reaches the TLS server by the name the
// container used, resolved and dialled by the gateway; the stats count it.
func TestEgressConnectAllowed(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "w1", "git.example.test")
	hc, res := e.client("w1", false)
	body, err := get(hc, "https://git.example.test/repo.git/info/refs")
	if err != nil || body != "tls saw git.example.test /repo.git/info/refs" {
		t.Fatalf("%q %v", body, err)
	}
	if res.status != http.StatusOK {
		t.Fatalf("CONNECT answered %d", res.status)
	}
	e.mu.Lock()
	dialed := slices.Clone(e.dialed)
	e.mu.Unlock()
	if !slices.Equal(dialed, []string{fakeAddr + ":443"}) {
		t.Fatalf("the gateway dialled %v", dialed)
	}
	st := e.stats(t, "w1")
	if st.EgressAllowed != 1 || st.EgressRefused != 0 || st.BytesUp < 100 || st.BytesDown < 100 {
		t.Fatalf("stats %+v", st)
	}
	testkit.Eventually(t, "the tunnel closed", 5*time.Second, func() bool { return e.stats(t, "w1").Open == 0 })
}

// A host not on the list is refused with 403, the header naming it, a
// body saying why; counted and logged.
func TestEgressRefused(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "w1", "git.example.test")
	resp, body, _ := connect(t, e.sock("w1"), "evil.example.test:443")
	checkRefused(t, "CONNECT", resp, body, "evil.example.test:443")
	if !strings.Contains(body, "not on the worker's egress allowlist") {
		t.Fatalf("body %q", body)
	}
	// Through an http.Client, as the wrapper sees it.
	hc, res := e.client("w1", false)
	if _, err := get(hc, "https://EVIL.example.test./x"); err == nil {
		t.Fatal("a refused CONNECT went through")
	}
	if res.status != http.StatusForbidden || res.refused != "evil.example.test:443" {
		t.Fatalf("the client saw %d %q", res.status, res.refused)
	}
	st := e.stats(t, "w1")
	if st.EgressRefused != 2 || st.EgressAllowed != 0 {
		t.Fatalf("stats %+v", st)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.dialed) != 0 {
		t.Fatalf("a refused host was dialled: %v", e.dialed)
	}
	if !strings.Contains(e.log.String(), `"msg":"egress refused","worker_id":"w1","socket":"egress.sock","host":"evil.example.test","port":443`) {
		t.Fatalf("log: %s", e.log)
	}
}

// After a rename (a warm pool worker's container given to a woken worker)
// the egress log names the worker the container serves now.
func TestEgressLogNamesTheWorkerAfterARename(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "warm", "git.example.test")
	refuse := func(id, host string) {
		t.Helper()
		resp, body, _ := connect(t, e.sock(id), host+":443")
		checkRefused(t, "CONNECT", resp, body, host+":443")
		want := `"msg":"egress refused","worker_id":"` + id + `","socket":"egress.sock","host":"` + host + `"`
		if !strings.Contains(e.log.String(), want) {
			t.Fatalf("no line %s in the log:\n%s", want, e.log)
		}
	}
	refuse("warm", "evil.example.test")
	if _, err := e.c.Rename(context.Background(), "warm", "woken"); err != nil {
		t.Fatal(err)
	}
	refuse("woken", "evil2.example.test")
}

// A PUT with a new list applies to the next request at once: the newly
// allowed host goes through and the removed one is refused within 1 s,
// on new connections; a tunnel opened before the change stays.
func TestEgressLiveChange(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "w1", "a.example.test")
	kept, _ := e.client("w1", true)
	if _, err := get(kept, "https://a.example.test/"); err != nil {
		t.Fatal(err)
	}
	hc, res := e.client("w1", false)
	if _, err := get(hc, "https://b.example.test/"); err == nil || res.refused != "b.example.test:443" {
		t.Fatalf("b before the change: %v %q", err, res.refused)
	}
	changed := time.Now()
	e.open(t, "w1", "b.example.test")
	if body, err := get(hc, "https://b.example.test/x"); err != nil || body != "tls saw b.example.test /x" {
		t.Fatalf("b after the change: %q %v", body, err)
	}
	if _, err := get(hc, "https://a.example.test/"); err == nil || res.refused != "a.example.test:443" {
		t.Fatalf("a after the change: %v %q", err, res.refused)
	}
	if d := time.Since(changed); d > time.Second {
		t.Fatalf("the change took %v", d)
	}
	// The tunnel to a, open before the change, stays.
	if body, err := get(kept, "https://a.example.test/still"); err != nil || body != "tls saw a.example.test /still" {
		t.Fatalf("the open tunnel after the change: %q %v", body, err)
	}
	info, err := e.c.Worker(context.Background(), "w1")
	if err != nil || !slices.Equal(info.Allow, []string{"b.example.test"}) || !slices.Equal(info.EgressAllow, []string{"b.example.test"}) ||
		info.EgressSocket != e.sock("w1") {
		t.Fatalf("GET /workers/w1: %+v %v", info, err)
	}
	if _, err := e.c.Worker(context.Background(), "nobody"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("GET of a worker not open: %v", err)
	}
}

// Wildcards and ports as the README says; names compare case-insensitively
// without their trailing dot.
func TestEgressWildcardsAndPorts(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "w1", "*.example.test", "api.other.test:8443", "Mixed.Case.Test.", "*.port.test:9000")
	for _, tc := range []struct {
		authority string
		ok        bool
	}{
		{"a.example.test:443", true},
		{"a.b.example.test:443", true},
		{"A.Example.TEST.:443", true},
		{"a.example.test:80", true},
		{"example.test:443", false}, // the suffix itself
		{"badexample.test:443", false},
		{"a.example.test:8443", false},
		{"a.example.test.evil.test:443", false},
		{"api.other.test:8443", true},
		{"api.other.test:443", false},
		{"x.api.other.test:8443", false},
		{"mixed.case.test:443", true},
		{"MIXED.case.test:80", true},
		{"mixed.case.test:22", false},
		{"a.port.test:9000", true},
		{"a.port.test:443", false},
		{"port.test:9000", false},
	} {
		resp, body, conn := connect(t, e.sock("w1"), tc.authority)
		if !tc.ok {
			host, port, _ := net.SplitHostPort(tc.authority)
			checkRefused(t, tc.authority, resp, body, strings.ToLower(strings.TrimSuffix(host, "."))+":"+port)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s %q, want 200", tc.authority, resp.Status, body)
			continue
		}
		if strings.HasSuffix(tc.authority, ":80") {
			continue // the plain HTTP server
		}
		// The tunnel reaches the TLS server.
		tc := tls.Client(conn, &tls.Config{RootCAs: e.pool, ServerName: "example.com"})
		if err := tc.Handshake(); err != nil {
			t.Errorf("TLS through the tunnel: %v", err)
		}
		tc.Close()
	}
}

// "*" and malformed entries are refused at PUT with 400 naming the entry,
// and the worker keeps its list.
func TestEgressBadEntries(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "w1", "git.example.test")
	for _, bad := range []string{"*", "*:443", "", " ", "a*.b", "*.*.b", "*.", "*example.test", "host:0", "host:65536", "host:",
		"host:http", "http://host", "host/path", "a b", "[::1", "[host]:443", "1.2.3", "127.1", "-a.b", "a-.b", "a..b", "fe80::1%eth0",
		"a:b:c", strings.Repeat("a", 64) + ".test", "ü.test", "host:443:1"} {
		err := e.c.Open(context.Background(), "w1", []string{"ok.example.test", bad})
		if err == nil || !strings.Contains(err.Error(), "400 Bad Request") || !strings.Contains(err.Error(), fmt.Sprintf("allow entry %q", bad)) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	err := e.c.Open(context.Background(), "w1", []string{"*"})
	if err == nil || !strings.Contains(err.Error(), "host networking") {
		t.Fatalf("*: %v", err)
	}
	info, err := e.c.Worker(context.Background(), "w1")
	if err != nil || !slices.Equal(info.Allow, []string{"git.example.test"}) {
		t.Fatalf("after bad PUTs: %+v %v", info, err)
	}
	if err := e.c.Open(context.Background(), "w2", []string{"*"}); err == nil {
		t.Fatal("a new worker opened with *")
	}
	if _, err := os.Stat(sockOf(e.dir, "w2", EgressSocket)); !os.IsNotExist(err) {
		t.Fatalf("a refused worker has sockets: %v", err)
	}
	for _, good := range []string{"GitHub.com.", "*.npmjs.org:443", "127.0.0.1:8443", "[::1]:443", "::1", "10.0.0.1", "_srv.example.test"} {
		if err := ParseAllow([]string{good}); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	if _, err := New(Config{Dir: e.dir, Redis: "127.0.0.1:1", Allow: []string{"*"}}); err == nil || !strings.Contains(err.Error(), "Config.Allow") {
		t.Fatalf("Config.Allow with *: %v", err)
	}
}

// A name on the list never lets an IP literal through, nor an IP literal
// a name; a listed IP literal is dialled as it is; a listed name that
// resolves to a local address is refused.
func TestEgressIPLiterals(t *testing.T) {
	e := newEgressEnv(t)
	tlsAddr := e.tls.Listener.Addr().String()
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	e.open(t, "w1", "git.example.test", "git.example.test:"+tlsPort, "rebind.example.test", "metadata.example.test")
	for _, a := range []string{fakeAddr + ":443", tlsAddr, "[::1]:443", "[::ffff:127.0.0.1]:" + tlsPort} {
		resp, body, _ := connect(t, e.sock("w1"), a)
		want := a
		if strings.HasPrefix(a, "[::ffff:") {
			want = tlsAddr
		}
		checkRefused(t, a, resp, body, want)
	}
	for _, name := range []string{"rebind.example.test", "metadata.example.test"} {
		resp, body, _ := connect(t, e.sock("w1"), name+":443")
		checkRefused(t, name, resp, body, name+":443")
		// What it resolved to is the gateway's log's, not the answer's.
		if !strings.Contains(body, "resolves to local addresses only") || strings.Contains(body, "127.0.0.1") || strings.Contains(body, "169.254") {
			t.Errorf("%s: %q", name, body)
		}
	}
	resp, body, _ := connect(t, e.sock("w1"), "nx.example.test:443")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("nx, not listed: %s %q", resp.Status, body)
	}

	e.open(t, "w1", tlsAddr, "nx.example.test")
	resp, _, conn := connect(t, e.sock("w1"), tlsAddr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a listed IP literal: %s", resp.Status)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: e.pool, ServerName: "example.com"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	tc.Close()
	resp, body, _ = connect(t, e.sock("w1"), "localhost:"+tlsPort)
	checkRefused(t, "a name for a listed IP literal", resp, body, "localhost:"+tlsPort)
	resp, body, _ = connect(t, e.sock("w1"), "nx.example.test:443")
	// The resolver's error (which names the host's resolver) is logged,
	// and the answer says only what failed.
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "does not resolve") || strings.Contains(body, "no such host") {
		t.Errorf("a name that does not resolve: %s %q", resp.Status, body)
	}
	if st := e.stats(t, "w1"); st.DialErrors != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Plain HTTP through the proxy: an allowed absolute-form request is
// forwarded (Proxy-* headers dropped both ways, hop-by-hop headers too),
// a refused one answered 403 with the header; anything that is no proxy
// request is 400.
func TestEgressPlainHTTP(t *testing.T) {
	e := newEgressEnv(t)
	e.open(t, "w1", "web.example.test", "alt.example.test:8080")
	sock := e.sock("w1")
	resp, body, _ := rawRequest(t, sock, "GET http://Web.Example.Test/p?q=1 HTTP/1.1\r\nHost: ignored.test\r\n"+
		"Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Foo: x\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-End: 2\r\n\r\n")
	// Host is the URL's (the Host line is ignored); the upstream got X-End
	// only: no Proxy-*, no X-Hop (named by Connection), nothing added.
	if resp.StatusCode != http.StatusOK || body != "web saw Web.Example.Test /p X-End" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if resp.Header.Get("Proxy-Agent") != "" || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("answer headers %v", resp.Header)
	}
	// Through an http.Client with HTTP_PROXY set, as the agent's tools do.
	hc, _ := e.client("w1", true)
	if body, err := get(hc, "http://alt.example.test:8080/x"); err != nil || !strings.HasPrefix(body, "web saw alt.example.test:8080 /x") {
		t.Fatalf("%q %v", body, err)
	}
	r, err := hc.Get("http://web.example.test:8080/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	checkRefused(t, "http://web.example.test:8080", r, string(b), "web.example.test:8080")
	resp, body, _ = rawRequest(t, sock, "POST http://evil.example.test/upload HTTP/1.1\r\nHost: evil.example.test\r\nContent-Length: 3\r\n\r\nabc")
	checkRefused(t, "POST", resp, body, "evil.example.test:80")
	for _, req := range []string{
		"GET /path HTTP/1.1\r\nHost: web.example.test\r\n\r\n",
		"GET https://web.example.test/ HTTP/1.1\r\nHost: web.example.test\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: web.example.test\r\n\r\n",
		"CONNECT web.example.test HTTP/1.1\r\nHost: web.example.test\r\n\r\n",
		"CONNECT /x HTTP/1.1\r\nHost: web.example.test\r\n\r\n",
		"CONNECT user@web.example.test:443 HTTP/1.1\r\nHost: web.example.test\r\n\r\n",
		"GET http://web.example.test:99999/ HTTP/1.1\r\nHost: web.example.test\r\n\r\n",
		"GET ftp://web.example.test/ HTTP/1.1\r\nHost: web.example.test\r\n\r\n",
	} {
		resp, body, _ := rawRequest(t, sock, req)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %s %q, want 400", req, resp.Status, body)
		}
	}
	st := e.stats(t, "w1")
	if st.EgressAllowed != 2 || st.EgressRefused != 2 {
		t.Fatalf("stats %+v", st)
	}
}
