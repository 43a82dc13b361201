package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Secrets of the tests: none may reach the container's side, the log,
// /stats or GET /workers/{id}.
const (
	gitToken = "Bearer s3cret-git-token"
	apiKey   = "s3cret-api-key"
	regPass  = "s3cret-reg-pass"
	regBasic = "Basic cmVnOnMzY3JldC1yZWctcGFzcw==" // reg:s3cret-reg-pass
)

// secrets are every form of the tests' secrets.
var secrets = []string{"s3cret", "czNjcmV0", regBasic}

// credEnv is a gateway with credentials whose egress reaches loopback
// test servers: every name resolves to fakeAddr; fakeAddr:80 dials the
// plain server, any other port the TLS server. Both record what they got.
type credEnv struct {
	dir   string
	g     *Gateway
	c     *Client
	up    *httptest.Server // TLS: the credentialed hosts' upstream
	plain *httptest.Server
	log   *syncBuf

	mu   sync.Mutex
	seen []seenReq
}

type seenReq struct {
	tls    bool
	host   string
	path   string
	header http.Header
	n      int64 // body bytes
}

func (e *credEnv) record(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	e.mu.Lock()
	e.seen = append(e.seen, seenReq{r.TLS != nil, r.Host, r.URL.Path, r.Header.Clone(), n})
	e.mu.Unlock()
	switch r.URL.Path {
	case "/redirect":
		w.Header().Set("Location", "https://git.example.test/moved?x=1")
		w.WriteHeader(http.StatusFound)
		return
	case "/reflect":
		// An upstream that reflects what it got in its answer's headers.
		w.Header().Set("X-Seen-Auth", r.Header.Get("Authorization"))
		w.Header().Set("WWW-Authenticate", `Basic realm="`+r.Header.Get("Authorization")+`"`)
	}
	fmt.Fprintf(w, "saw %s %s %d", r.Host, r.URL.Path, n)
}

// last returns what the servers saw last.
func (e *credEnv) last(t *testing.T) seenReq {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) == 0 {
		t.Fatal("no request reached the servers")
	}
	return e.seen[len(e.seen)-1]
}

func (e *credEnv) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.seen)
}

func newCredEnv(t *testing.T, cfg Config) *credEnv {
	t.Helper()
	e := &credEnv{dir: shortDir(t), log: &syncBuf{}}
	e.up = httptest.NewUnstartedServer(http.HandlerFunc(e.record))
	e.up.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.up.StartTLS()
	t.Cleanup(e.up.Close)
	e.plain = httptest.NewServer(http.HandlerFunc(e.record))
	t.Cleanup(e.plain.Close)
	pool := x509.NewCertPool()
	pool.AddCert(e.up.Certificate())
	cfg.Dir = e.dir
	cfg.Redis = "127.0.0.1:1"
	cfg.Log = slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// httptest's certificate names example.com.
	if cfg.UpstreamTLS == nil {
		cfg.UpstreamTLS = &tls.Config{RootCAs: pool, ServerName: "example.com"}
	}
	cfg.Resolver = func(context.Context, string) ([]string, error) { return []string{fakeAddr}, nil }
	cfg.DialEgress = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(addr)
		if host != fakeAddr {
			return nil, fmt.Errorf("test network: no route to %s", addr)
		}
		var d net.Dialer
		if port == "80" {
			return d.DialContext(ctx, network, e.plain.Listener.Addr().String())
		}
		return d.DialContext(ctx, network, e.up.Listener.Addr().String())
	}
	e.g, e.c = startGatewayWith(t, cfg)
	return e
}

func (e *credEnv) open(t *testing.T, id, project string, allow ...string) {
	t.Helper()
	if _, err := e.c.OpenSpec(context.Background(), WorkerSpec{WorkerID: id, ProjectID: project, Allow: allow}); err != nil {
		t.Fatal(err)
	}
}

// client is an http.Client in the container whose proxy is worker id's
// egress.sock; it trusts the TLS server (for CONNECT).
func (e *credEnv) client(id string) *http.Client {
	sock := sockOf(e.dir, id, EgressSocket)
	pool := x509.NewCertPool()
	pool.AddCert(e.up.Certificate())
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.sock"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// do sends req with hc and returns the answer, its body read.
func do(t *testing.T, hc *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// noSecret fails when s holds any form of the tests' secrets.
func noSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			t.Errorf("%s holds a secret (%q): %s", what, sec, s)
		}
	}
}

var testCredentials = []Credential{
	{Host: "git.example.test", Value: gitToken, Projects: []string{"shop"}},
	{Host: "api.example.test", Header: "x-api-key", Value: apiKey, Workers: []string{"w1"}},
	{Host: "reg.example.test", Username: "reg", Password: regPass},
}

// A worker's plain http:// request to a credentialed host goes upstream
// as HTTPS with the credential's header (the container's own replaced);
// the answer carries no credential; a worker the credential is not for,
// a CONNECT, and a host off the allowlist get none.
func TestCredentialAdded(t *testing.T) {
	e := newCredEnv(t, Config{Credentials: testCredentials})
	all := []string{"git.example.test", "api.example.test", "reg.example.test"}
	e.open(t, "w1", "shop", all...)
	e.open(t, "w2", "other", all...)
	e.open(t, "w3", "shop", "elsewhere.example.test")
	hc := e.client("w1")

	req, _ := http.NewRequest(http.MethodGet, "http://git.example.test/repo.git/info/refs?service=git-upload-pack", nil)
	req.Header.Set("Authorization", "Basic Y29udGFpbmVyOnRyaWVz") // the container's own: replaced
	resp, body := do(t, hc, req)
	got := e.last(t)
	if resp.StatusCode != http.StatusOK || body != "saw git.example.test /repo.git/info/refs 0" {
		t.Fatalf("%s %q", resp.Status, body)
	}
	if !got.tls || got.header.Get("Authorization") != gitToken || len(got.header.Values("Authorization")) != 1 {
		t.Fatalf("upstream saw tls=%v Authorization=%q", got.tls, got.header.Values("Authorization"))
	}

	// Reflected in the answer's headers: taken out.
	resp, _ = do(t, hc, mustReq(t, http.MethodGet, "http://git.example.test/reflect", nil))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Seen-Auth") != "" || resp.Header.Get("WWW-Authenticate") != "" {
		t.Fatalf("reflected: %s %v", resp.Status, resp.Header)
	}
	// A redirect to https://host/ points back at http://host/.
	resp, _ = do(t, hc, mustReq(t, http.MethodGet, "http://git.example.test/redirect", nil))
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://git.example.test/moved?x=1" {
		t.Fatalf("redirect: %s %q", resp.Status, resp.Header.Get("Location"))
	}

	// A large body streams through, the credential added (a fetch's
	// post: a push's is read first, gitpush.go).
	const size = 8 << 20
	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 64<<10)
		for i := 0; i < size/len(chunk); i++ {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	resp, body = do(t, hc, mustReq(t, http.MethodPost, "http://git.example.test/repo.git/git-upload-pack", pr))
	if got := e.last(t); resp.StatusCode != http.StatusOK || got.n != size || got.header.Get("Authorization") != gitToken {
		t.Fatalf("POST: %s %q, upstream got %d bytes, %q", resp.Status, body, got.n, got.header.Get("Authorization"))
	}

	// Another header, another host.
	do(t, hc, mustReq(t, http.MethodGet, "http://api.example.test/v1", nil))
	if got := e.last(t); !got.tls || got.header.Get("X-Api-Key") != apiKey || got.host != "api.example.test" {
		t.Fatalf("api: %+v", got)
	}
	// username/password: Basic.
	do(t, hc, mustReq(t, http.MethodGet, "http://reg.example.test/pkg", nil))
	if got := e.last(t); got.header.Get("Authorization") != regBasic {
		t.Fatalf("reg: %q", got.header.Get("Authorization"))
	}

	// CONNECT: TLS end to end, no credential.
	resp, body = do(t, hc, mustReq(t, http.MethodGet, "https://git.example.test/tunnel", nil))
	if got := e.last(t); resp.StatusCode != http.StatusOK || got.path != "/tunnel" || got.header.Get("Authorization") != "" {
		t.Fatalf("CONNECT: %s %q, Authorization %q", resp.Status, body, got.header.Get("Authorization"))
	}

	// w2 is of another project, and not w1: git and api get nothing (plain
	// HTTP to port 80, as without credentials); reg is for everyone.
	hc2 := e.client("w2")
	for _, h := range []string{"git", "api"} {
		resp, body := do(t, hc2, mustReq(t, http.MethodGet, "http://"+h+".example.test/x", nil))
		got := e.last(t)
		if resp.StatusCode != http.StatusOK || got.tls || got.header.Get("Authorization") != "" || got.header.Get("X-Api-Key") != "" {
			t.Fatalf("w2 to %s: %s %q, upstream saw tls=%v %v", h, resp.Status, body, got.tls, got.header)
		}
	}
	do(t, hc2, mustReq(t, http.MethodGet, "http://reg.example.test/pkg", nil))
	if got := e.last(t); got.header.Get("Authorization") != regBasic {
		t.Fatalf("w2 to reg: %q", got.header.Get("Authorization"))
	}

	// w3 is of the project, but git.example.test is not on its allowlist.
	n := e.count()
	resp, body = do(t, e.client("w3"), mustReq(t, http.MethodGet, "http://git.example.test/x", nil))
	checkRefused(t, "w3", resp, body, "git.example.test:443")
	if e.count() != n {
		t.Fatal("a refused request reached the upstream")
	}

	// The hosts each worker has a credential for; no secret anywhere.
	for id, want := range map[string][]string{"w1": {"api.example.test", "git.example.test", "reg.example.test"},
		"w2": {"reg.example.test"}, "w3": {"git.example.test", "reg.example.test"}} {
		info, err := e.c.Worker(context.Background(), id)
		if err != nil || !slices.Equal(info.CredentialHosts, want) {
			t.Errorf("%s: credential_hosts %v %v, want %v", id, info.CredentialHosts, err, want)
		}
		b, _ := json.Marshal(info)
		noSecret(t, "GET /workers/"+id, string(b))
	}
	st, err := e.c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st["w1"].EgressCredentialed != 6 || st["w2"].EgressCredentialed != 1 || st["w3"].EgressRefused != 1 {
		t.Errorf("stats %+v", st)
	}
	b, _ := json.Marshal(st)
	noSecret(t, "/stats", string(b))
	noSecret(t, "the gateway's log", e.log.String())
	for _, f := range []string{"w1", "w2", "w3"} {
		b, _ := os.ReadFile(filepath.Join(e.dir, f, WorkerFile))
		noSecret(t, "worker.json", string(b))
	}
}

func mustReq(t *testing.T, method, u string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// A credential's upstream that does not answer is 502, and the error
// shows no secret; so is one whose certificate the gateway does not trust.
func TestCredentialUpstreamErrors(t *testing.T) {
	// The system's roots only: the test server is not trusted.
	e := newCredEnv(t, Config{Credentials: []Credential{{Host: "git.example.test", Value: gitToken}}, UpstreamTLS: &tls.Config{}})
	e.open(t, "w1", "", "git.example.test")
	resp, body := do(t, e.client("w1"), mustReq(t, http.MethodGet, "http://git.example.test/x", nil))
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("untrusted upstream: %s %q", resp.Status, body)
	}
	noSecret(t, "502", body)
	noSecret(t, "the gateway's log", e.log.String())
}

func TestCredentialValidation(t *testing.T) {
	for _, tc := range []struct {
		c    Credential
		want string
	}{
		{Credential{Value: "x"}, "no host"},
		{Credential{Host: "*.example.test", Value: "x"}, "want a host name or an IP literal"},
		{Credential{Host: "a.test:443", Value: "x"}, "want a host name or an IP literal"},
		{Credential{Host: "a.test", Port: 70000, Value: "x"}, "port 70000"},
		{Credential{Host: "a.test", Header: "Bad Header", Value: "x"}, "header: want a header name"},
		{Credential{Host: "a.test", Header: "Host", Value: "x"}, "not a header a credential may set"},
		{Credential{Host: "a.test", Header: "proxy-authorization", Value: "x"}, "not a header a credential may set"},
		{Credential{Host: "a.test"}, "no value"},
		{Credential{Host: "a.test", Value: "s3cret\r\nX-Evil: 1"}, "control characters"},
		{Credential{Host: "a.test", Value: "x", Username: "u", Password: "s3cret"}, "both value and username/password"},
		{Credential{Host: "a.test", Username: "u"}, "username without password"},
		{Credential{Host: "a.test", Username: "u:v", Password: "s3cret"}, "no ':'"},
		{Credential{Host: "a.test", Header: "X-Key", Username: "u", Password: "s3cret"}, "header must be Authorization"},
		{Credential{Host: "a.test", Value: "x", Projects: []string{""}}, "empty project id"},
		{Credential{Host: "a.test", Value: "x", Workers: []string{"../x"}}, "invalid worker id"},
	} {
		_, err := parseCredentials("test", []Credential{{Host: "ok.test", Value: "x"}, tc.c})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "test: entry 1 (host ") {
			t.Errorf("%v: %v, want %q", tc.c, err, tc.want)
		} else {
			noSecret(t, "error", err.Error())
		}
	}
	for _, c := range []Credential{
		{Host: "Git.Example.Test.", Value: "x"},
		{Host: "10.0.0.1", Port: 8443, Header: "X-Token", Value: "x"},
		{Host: "[::1]", Username: "u", Password: "p"},
	} {
		if _, err := parseCredentials("test", []Credential{c}); err != nil {
			t.Errorf("%v: %v", c, err)
		}
	}
	if s := fmt.Sprintf("%v %+v %#v %s", testCredentials[0], testCredentials[0], testCredentials[0], testCredentials); strings.Contains(s, "s3cret") {
		t.Errorf("a Credential printed shows its secret: %s", s)
	}
}

// writeCredFile writes creds to path with mode.
func writeCredFile(t *testing.T, path string, mode os.FileMode, creds any) {
	t.Helper()
	b, err := json.Marshal(creds)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The credentials file: refused at start unless 0600 (or stricter) and
// valid; read again by ReloadCredentials and when it changes; a bad new
// version leaves the credentials in force as they were.
func TestCredentialsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "credentials.json")
	dir := shortDir(t)
	writeCredFile(t, path, 0o644, []Credential{{Host: "git.example.test", Value: gitToken}})
	_, err := New(Config{Dir: dir, Redis: "127.0.0.1:1", CredentialsFile: path})
	if err == nil || !strings.Contains(err.Error(), "mode 0644: want 0600") {
		t.Fatalf("0644: %v", err)
	}
	writeCredFile(t, path, 0o600, []Credential{{Host: "git.example.test", Header: "X-A", Username: "u", Password: regPass}})
	_, err = New(Config{Dir: dir, Redis: "127.0.0.1:1", CredentialsFile: path})
	if err == nil || !strings.Contains(err.Error(), `entry 0 (host "git.example.test")`) {
		t.Fatalf("a bad entry: %v", err)
	}
	noSecret(t, "error", err.Error())
	if err := os.WriteFile(path, []byte(`[{"host": "git.example.test", "pasword": "s3cret"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = New(Config{Dir: dir, Redis: "127.0.0.1:1", CredentialsFile: path}); err == nil || !strings.Contains(err.Error(), `unknown field "pasword"`) {
		t.Fatalf("a misspelt field: %v", err)
	}
	noSecret(t, "error", err.Error())
	if _, err = New(Config{Dir: dir, Redis: "127.0.0.1:1", CredentialsFile: path + ".missing"}); err == nil {
		t.Fatal("a missing file: no error")
	}

	writeCredFile(t, path, 0o600, map[string]any{"credentials": []Credential{{Host: "git.example.test", Value: gitToken, Workers: []string{"w1"}}}})
	e := newCredEnv(t, Config{CredentialsFile: path, CredentialsPoll: 20 * time.Millisecond,
		Credentials: []Credential{{Host: "api.example.test", Header: "X-Api-Key", Value: apiKey}}})
	e.open(t, "w1", "", "git.example.test", "reg.example.test", "api.example.test")
	hosts := func() []string {
		info, err := e.c.Worker(context.Background(), "w1")
		if err != nil {
			t.Fatal(err)
		}
		return info.CredentialHosts
	}
	if h := hosts(); !slices.Equal(h, []string{"api.example.test", "git.example.test"}) {
		t.Fatalf("hosts %v", h)
	}
	do(t, e.client("w1"), mustReq(t, http.MethodGet, "http://git.example.test/x", nil))
	if got := e.last(t); got.header.Get("Authorization") != gitToken {
		t.Fatalf("from the file: %v", got.header)
	}

	// Changed: read again within a poll or two.
	writeCredFile(t, path, 0o600, []Credential{{Host: "reg.example.test", Username: "reg", Password: regPass}})
	waitFor(t, func() bool { return slices.Equal(hosts(), []string{"api.example.test", "reg.example.test"}) })
	do(t, e.client("w1"), mustReq(t, http.MethodGet, "http://reg.example.test/x", nil))
	if got := e.last(t); got.header.Get("Authorization") != regBasic {
		t.Fatalf("after the change: %v", got.header)
	}
	// Made readable by others: refused, the credentials in force stay.
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := e.g.ReloadCredentials(); err == nil || !strings.Contains(err.Error(), "mode 0640") {
		t.Fatalf("reload of a 0640 file: %v", err)
	}
	if h := hosts(); !slices.Equal(h, []string{"api.example.test", "reg.example.test"}) {
		t.Fatalf("after a refused reload: %v", h)
	}
	noSecret(t, "the gateway's log", e.log.String())
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
