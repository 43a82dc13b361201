package faults

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol/testkit"
)

// DockerProxy stands between one manager and the Docker engine: a unix
// socket that forwards the Engine API, where a case can hold the manager's
// calls (the engine seems to hang) or act at the moment the manager makes
// a given call (SIGKILL it between ContainerCreate and ContainerStart).
// Point the manager at it with DOCKER_HOST=Host().
type DockerProxy struct {
	sock string
	srv  *http.Server

	mu      sync.Mutex
	stalled chan struct{} // non-nil while every call is held; closed by Release
	hooks   []dockerHook
}

type dockerHook struct {
	method string
	path   *regexp.Regexp
	// fn runs before the call is forwarded; true holds the call until the
	// manager goes away (it never reaches the engine).
	fn func() bool
}

var apiVersion = regexp.MustCompile(`^/v[0-9.]+`)

// DockerProxy starts a proxy to the engine's socket for the case; it
// stops when the case has ended (after its final shutdown, which a manager
// behind the proxy makes through it).
func (c *Case) DockerProxy() *DockerProxy {
	t := c.T
	t.Helper()
	dir, err := os.MkdirTemp("", "faults-docker-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	p := &DockerProxy{sock: filepath.Join(dir, "docker.sock")}
	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatalf("docker proxy: %v", err)
	}
	engine := testkit.DockerSocket()
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", engine)
		}},
		FlushInterval: -1, // events and build output stream
		// A held call ends when its manager is killed: not worth a line.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.hold(r) {
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	c.AfterFinish(func() {
		p.Release()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		_ = p.srv.Close()
		os.RemoveAll(dir)
	})
	return p
}

// Host is the DOCKER_HOST value that reaches the engine through the proxy.
func (p *DockerProxy) Host() string { return "unix://" + p.sock }

// On calls fn when the manager makes a call of method whose path (without
// the API version) matches pathRe, before the call is forwarded; fn
// returning true holds that call for good.
func (p *DockerProxy) On(method, pathRe string, fn func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hooks = append(p.hooks, dockerHook{method: method, path: regexp.MustCompile(pathRe), fn: fn})
}

// Stall holds every call from now on until Release: the manager finds the
// engine hanging.
func (p *DockerProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Release forwards the calls held by Stall, and every later one.
func (p *DockerProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// hold decides whether to hold r, and holds it; it returns true when the
// call must not be forwarded (the manager went away meanwhile).
func (p *DockerProxy) hold(r *http.Request) bool {
	path := apiVersion.ReplaceAllString(r.URL.Path, "")
	p.mu.Lock()
	stalled := p.stalled
	var fns []func() bool
	for _, h := range p.hooks {
		if h.method == r.Method && h.path.MatchString(path) {
			fns = append(fns, h.fn)
		}
	}
	p.mu.Unlock()
	for _, fn := range fns {
		if fn() {
			<-r.Context().Done()
			return true
		}
	}
	if stalled != nil {
		select {
		case <-stalled:
		case <-r.Context().Done():
			return true
		}
	}
	return false
}
