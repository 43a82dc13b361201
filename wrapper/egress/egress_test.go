package egress

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGateway stands for the gateway's egress socket: CONNECT and plain
// HTTP to allowed host:port pass (to target), anything else is a 403
// naming it.
func fakeGateway(t *testing.T, allowed, target string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hostPort := r.Host
		if _, _, err := net.SplitHostPort(hostPort); err != nil {
			hostPort += ":80"
		}
		if hostPort != allowed {
			w.Header().Set("X-Agentvisor-Refused", hostPort)
			http.Error(w, r.Host+" is not on the worker's allowlist", http.StatusForbidden)
			return
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer up.Close()
		if r.Method != http.MethodConnect {
			r.URL.Host, r.RequestURI = target, ""
			resp, err := http.DefaultTransport.RoundTrip(r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return
		}
		c, _, _ := w.(http.Hijacker).Hijack()
		defer c.Close()
		_, _ = c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		done := make(chan struct{})
		go func() { _, _ = io.Copy(up, c); close(done) }()
		_, _ = io.Copy(c, up)
		<-done
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return path
}

// An allowed HTTPS request goes through the gateway's socket to its
// server; a refused one reaches the caller as the gateway's 403; plain
// HTTP likewise. (The refusal is published from the gateway's refusal
// log: refusals_test.go.)
func TestFront(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secure hello") }))
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain hello") }))
	defer plain.Close()
	for _, c := range []struct {
		name, allowed, target, url, want string
	}{
		{"https", "git.example.test:443", strings.TrimPrefix(tlsSrv.URL, "https://"), "https://git.example.test/repo", "secure hello"},
		{"http", "pkg.example.test:80", strings.TrimPrefix(plain.URL, "http://"), "http://pkg.example.test/x", "plain hello"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := Start(fakeGateway(t, c.allowed, c.target), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			proxy, _ := url.Parse(f.URL)
			tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr}
			resp, err := cl.Get(c.url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != c.want {
				t.Fatalf("allowed: %d %q", resp.StatusCode, body)
			}
			u := strings.Replace(c.url, ".example.test", ".elsewhere.test", 1)
			resp, err = cl.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Fatalf("refused: %d", resp.StatusCode)
				}
			} // an HTTPS client reports a refused CONNECT as an error
		})
	}
}

// Garbage instead of a proxy request is answered 400, and the front
// serves on.
func TestFrontRefusesGarbage(t *testing.T) {
	f, err := Start(filepath.Join(t.TempDir(), "none.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(f.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("\x00\x01 not http\r\n\r\n"))
	b, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(b), "HTTP/1.1 400") {
		t.Fatalf("garbage answered %q", b)
	}
	// A request the gateway cannot take (its socket is missing): 502.
	c, _ = net.Dial("tcp", strings.TrimPrefix(f.URL, "http://"))
	_, _ = c.Write([]byte("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n"))
	b, _ = io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(b), "HTTP/1.1 502") {
		t.Fatalf("without a gateway: %q", b)
	}
}
