package faults

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/agentvisor/agentvisor/testkit"
)

// DockerProxy stands between one manager and the Docker engine: a unix
// socket that forwards the Engine API, where a case can hold the manager's
// calls (the engine seems to hang) or act at the moment the manager makes
// a given call (SIGKILL it between ContainerCreate and ContainerStart).
// Point the manager at it with DOCKER_HOST=Host().
//
// Its faults and delays are for the calls on workers' containers: the
// spare network namespaces' holders a manager makes for sealed workers
// (spawner/engine/docker/netns.go; created without a name) go through
// untouched, except for Stall, which holds every call as a hung engine
// would.
type DockerProxy struct {
	sock string
	dir  string
	srv  *http.Server

	mu      sync.Mutex
	stalled chan struct{} // non-nil while every call is held; closed by Release
	hooks   []dockerHook
	delays  []dockerDelay
	lates   []dockerDelay
	timers  []dockerTimer
	late    sync.WaitGroup  // calls forwarded late, in flight
	holders map[string]bool // container ids of the namespaces' holders
}

type dockerTimer struct {
	method string
	path   *regexp.Regexp
	fn     func(r *http.Request, took time.Duration)
}

type dockerDelay struct {
	method string
	path   *regexp.Regexp
	fn     func() time.Duration
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
	p, err := NewDockerProxy(testkit.DockerSocket())
	if err != nil {
		t.Fatalf("docker proxy: %v", err)
	}
	// What the engine does late counts: the case counts containers once
	// the calls forwarded late are done.
	c.BeforeCount(func() {
		done := make(chan struct{})
		go func() { p.late.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	c.AfterFinish(p.Close)
	return p
}

// NewDockerProxy starts a proxy to the engine listening on the unix
// socket engine (a path); Close stops it.
func NewDockerProxy(engine string) (*DockerProxy, error) {
	dir, err := os.MkdirTemp("", "faults-docker-") // short: a socket path has at most 107 bytes
	if err != nil {
		return nil, err
	}
	p := &DockerProxy{sock: filepath.Join(dir, "docker.sock"), dir: dir}
	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", engine)
		}},
		ModifyResponse: p.delayResponse,
		FlushInterval:  -1, // events and build output stream
		// A held call ends when its manager is killed: not worth a line.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(context.WithValue(r.Context(), sentAt{}, time.Now()))
		if d := p.lateBy(r); d > 0 {
			// The engine gets the call late, and acts on it even if the
			// manager gave up on it meanwhile.
			p.late.Add(1)
			defer p.late.Done()
			// The whole call is read now: the manager may be gone by the
			// time it is forwarded.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			r = r.WithContext(context.WithoutCancel(r.Context()))
			r.Body = io.NopCloser(bytes.NewReader(body))
			time.Sleep(d)
			// Only the ResponseWriter's own methods: the proxy would cancel
			// the call when the manager has gone (CloseNotifier).
			rp.ServeHTTP(struct{ http.ResponseWriter }{w}, r)
			return
		}
		if p.hold(r) {
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close releases the held calls and stops the proxy.
func (p *DockerProxy) Close() {
	p.Release()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	_ = p.srv.Close()
	os.RemoveAll(p.dir)
}

// sentAt is the context key of when the proxy received a call.
type sentAt struct{}

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

// DelayResponse holds the engine's answer to a call of method whose path
// matches pathRe for the time fn returns, before passing it on: the engine
// has done what the manager asked (created the container, say), the
// manager does not know it yet.
func (p *DockerProxy) DelayResponse(method, pathRe string, fn func() time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delays = append(p.delays, dockerDelay{method: method, path: regexp.MustCompile(pathRe), fn: fn})
}

// DelayRequest passes a call of method whose path matches pathRe to the
// engine only after the time fn returns, and then whether or not the
// manager still waits for it: a slow engine that completes a call (creates
// a container) its caller cancelled.
func (p *DockerProxy) DelayRequest(method, pathRe string, fn func() time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lates = append(p.lates, dockerDelay{method: method, path: regexp.MustCompile(pathRe), fn: fn})
}

var containerPath = regexp.MustCompile(`^/containers/([^/]+)/`)

// holderCallLocked reports whether r is a call on a spare namespace's
// holder: its create (a container create without a name) or a call on a
// container the proxy saw made so.
func (p *DockerProxy) holderCallLocked(r *http.Request, path string) bool {
	if r.Method == http.MethodPost && path == "/containers/create" {
		return r.URL.Query().Get("name") == ""
	}
	m := containerPath.FindStringSubmatch(path)
	return m != nil && p.holders[m[1]]
}

// noteHolder records the id of a holder the engine made.
func (p *DockerProxy) noteHolder(resp *http.Response) {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var made struct{ Id string }
	if err != nil || json.Unmarshal(body, &made) != nil || made.Id == "" {
		return
	}
	p.mu.Lock()
	if p.holders == nil {
		p.holders = map[string]bool{}
	}
	p.holders[made.Id] = true
	p.mu.Unlock()
}

func (p *DockerProxy) lateBy(r *http.Request) time.Duration {
	path := apiVersion.ReplaceAllString(r.URL.Path, "")
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holderCallLocked(r, path) {
		return 0
	}
	var d time.Duration
	for _, h := range p.lates {
		if h.method == r.Method && h.path.MatchString(path) {
			d += h.fn()
		}
	}
	return d
}

// Time calls fn with every call of method whose path matches pathRe and
// how long the engine took to answer it (from the call's arrival at the
// proxy to the engine's answer): the engine's share of what a manager
// does, measured outside the manager.
func (p *DockerProxy) Time(method, pathRe string, fn func(r *http.Request, took time.Duration)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timers = append(p.timers, dockerTimer{method: method, path: regexp.MustCompile(pathRe), fn: fn})
}

func (p *DockerProxy) delayResponse(resp *http.Response) error {
	r := resp.Request
	path := apiVersion.ReplaceAllString(r.URL.Path, "")
	p.mu.Lock()
	if p.holderCallLocked(r, path) {
		p.mu.Unlock()
		if path == "/containers/create" && resp.StatusCode == http.StatusCreated {
			p.noteHolder(resp)
		}
		return nil
	}
	var d time.Duration
	for _, h := range p.delays {
		if h.method == r.Method && h.path.MatchString(path) {
			d += h.fn()
		}
	}
	var timers []func(*http.Request, time.Duration)
	for _, h := range p.timers {
		if h.method == r.Method && h.path.MatchString(path) {
			timers = append(timers, h.fn)
		}
	}
	p.mu.Unlock()
	if at, ok := r.Context().Value(sentAt{}).(time.Time); ok {
		for _, fn := range timers {
			fn(r, time.Since(at))
		}
	}
	if d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
	}
	return nil
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
	holder := p.holderCallLocked(r, path)
	for _, h := range p.hooks {
		if !holder && h.method == r.Method && h.path.MatchString(path) {
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
