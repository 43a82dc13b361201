package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"runtime/debug"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// The egress proxy: Dir/{id}/egress.sock is an HTTP forward proxy for
// worker id alone. It takes
//
//	CONNECT host:port         → 200, then a byte relay both ways (HTTPS, or anything over TCP)
//	GET http://host[:port]/p  → forwarded, streaming (any method, absolute-form, http only)
//
// and answers anything else 400. Each request is checked against the
// allowlist in force (Config.Allow and the worker's Allow, read at each
// request: a PUT applies to the next request, an open tunnel stays). A
// request not on it is answered 403 with the header X-Agentvisor-Refused:
// host:port. An allowed name is resolved by the gateway (Config.Resolver),
// and an answer that points at the host itself (loopback), at a
// link-local address (a cloud's metadata service), or at an unspecified,
// multicast, private, carrier-grade NAT or translated address is refused
// too: a name on the list cannot be made to reach what the list does not
// name (an internal host is listed by its IP address). An IP literal on
// the list is dialled as it is (egress_dial.go).
//
// A plain HTTP request for host:80 where host has a credential for the
// worker (credentials.go) is forwarded as HTTPS to the credential's
// host:port, its header added (egress_credential.go): that upstream is
// what the allowlist must allow.
//
// A request's way: ServeHTTP → requestTarget (what it asks for) →
// credentialFor (a credential moves it to HTTPS) → admit (allowlist,
// resolution) → connect (a tunnel) or forward (plain HTTP).

// RefusedHeader names the host:port of a refused egress request, on its
// 403 answer, for the client that made it (the wrapper learns of the
// refusal from the worker's refusal log, refusals.go).
const RefusedHeader = "X-Agentvisor-Refused"

// Bounds on what a container sends the egress proxy: a request's header
// must come whole within egressHeaderTimeout and within
// egressMaxHeaderBytes; an idle kept-alive connection is closed after
// egressIdleTimeout.
var (
	egressHeaderTimeout  = 10 * time.Second
	egressIdleTimeout    = 2 * time.Minute
	egressMaxHeaderBytes = 32 << 10
)

// egressPolicy is what every worker's egress proxy shares: the operator's
// allowlist, the credentials, and how an allowed name is resolved and an
// address dialled.
type egressPolicy struct {
	defaults    allowlist // Config.Allow
	creds       credentialSource
	resolver    func(ctx context.Context, host string) ([]string, error)
	dialer      func(ctx context.Context, network, addr string) (net.Conn, error)
	dialTimeout time.Duration
	maxConns    int
	upstreamTLS *tls.Config
}

// credentialSource holds the credentials in force.
type credentialSource interface {
	current() credentials
}

// egressParams are what the egress policy is built from (Config's).
type egressParams struct {
	allow       []string
	creds       credentialSource
	resolver    func(ctx context.Context, host string) ([]string, error)          // nil: net.DefaultResolver
	dialer      func(ctx context.Context, network, addr string) (net.Conn, error) // nil: a net.Dialer
	dialTimeout time.Duration
	maxConns    int
	upstreamTLS *tls.Config
}

func newEgressPolicy(p egressParams) (*egressPolicy, error) {
	defaults, err := parseAllow(p.allow)
	if err != nil {
		return nil, fmt.Errorf("%w (in Config.Allow)", err)
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver.LookupHost
	}
	if p.dialer == nil {
		var d net.Dialer
		p.dialer = d.DialContext
	}
	return &egressPolicy{defaults: defaults, creds: p.creds, resolver: p.resolver, dialer: p.dialer,
		dialTimeout: p.dialTimeout, maxConns: p.maxConns, upstreamTLS: p.upstreamTLS}, nil
}

// egressWorker is the worker an egress proxy serves: its own allowlist,
// and what its credentials are scoped to.
type egressWorker interface {
	allows(t target) bool
	scope() (id, project string)
	// The push grant (gitpush.go), put with the worker's token.
	modelTokenOK(token string) bool
	pushGrant() *pushGrant
	setPushGrant(raw *GitGrant, g *pushGrant) error
}

// egress is one worker's egress proxy.
type egress struct {
	policy *egressPolicy
	side   workerSide
	w      egressWorker
	feed   http.Handler // the worker's refusal log, for its wrapper (RefusalsPath)
	srv    *http.Server
	tr     *http.Transport // the worker's own: its idle connections go with it
	rp     *httputil.ReverseProxy
	crp    *httputil.ReverseProxy // a credentialed request: HTTPS upstream, the credential added
}

func newEgress(policy *egressPolicy, side workerSide, w egressWorker, feed http.Handler) *egress {
	e := &egress{policy: policy, side: side, w: w, feed: feed}
	errLog := newErrorLog(side.log)
	e.tr = &http.Transport{
		Proxy:               nil, // never the gateway's own proxy settings
		DialContext:         e.transportDial,
		MaxIdleConns:        16,
		MaxIdleConnsPerHost: 4,
		// Dials, live and idle connections to one upstream, at most: a
		// container that opens and drops requests in a loop cannot make
		// the gateway dial without end.
		MaxConnsPerHost:       policy.maxConns,
		IdleConnTimeout:       60 * time.Second,
		ExpectContinueTimeout: time.Second,
		// What the container asked for is what it gets: no gzip added
		// and undone on its behalf.
		DisableCompression: true,
		// A credentialed request's upstream TLS (ServerName is the
		// request's host, set by the transport).
		TLSClientConfig:     policy.upstreamTLS.Clone(),
		TLSHandshakeTimeout: 10 * time.Second,
	}
	e.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The Host header as the container wrote it; the URL (what
			// is dialled) is the host:port that was checked.
			pr.Out.Host = pr.In.Host
			dropProxyHeaders(pr.Out.Header)
		},
		ModifyResponse: func(resp *http.Response) error {
			dropProxyHeaders(resp.Header)
			resp.Header.Del(RefusedHeader) // only the gateway's own refusals name one
			return nil
		},
		Transport:     e.tr,
		FlushInterval: -1, // streamed as it comes (server-sent events, chunked answers)
		ErrorLog:      errLog,
		ErrorHandler:  e.upstreamError,
	}
	e.crp = &httputil.ReverseProxy{
		Rewrite:        e.credentialRewrite,
		ModifyResponse: e.credentialResponse,
		Transport:      e.tr,
		FlushInterval:  -1, // git's smart HTTP streams both ways
		ErrorLog:       errLog,
		ErrorHandler:   e.upstreamError,
	}
	e.srv = &http.Server{
		Handler:                      e,
		ReadHeaderTimeout:            egressHeaderTimeout,
		IdleTimeout:                  egressIdleTimeout,
		MaxHeaderBytes:               egressMaxHeaderBytes,
		DisableGeneralOptionsHandler: true, // OPTIONS * is no proxy request: 400
		ErrorLog:                     errLog,
	}
	return e
}

// dropProxyHeaders removes every Proxy-* header: what the container says
// to its proxy is not for the upstream, and the reverse.
func dropProxyHeaders(h http.Header) {
	for k := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Proxy-") {
			delete(h, k)
		}
	}
}

// serve serves the proxy on l until the worker is closed.
func (e *egress) serve(l *unixListener) { serveHTTP(e.side, e.srv, l, "egress proxy") }

func (e *egress) close() {
	_ = e.srv.Close()
	e.tr.CloseIdleConnections()
}

// allows reports whether the allowlist in force (the operator's and the
// worker's) allows t.
func (e *egress) allows(t target) bool {
	return e.policy.defaults.allows(t) || e.w.allows(t)
}

// ServeHTTP answers one request of the container.
func (e *egress) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			e.side.log.Error("egress request panicked", "panic", p, "stack", string(debug.Stack()))
			panic(http.ErrAbortHandler) // closes this connection only, quietly
		}
	}()
	// A closed worker ends its requests, dials included.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(e.side.ctx, cancel)
	defer stop()

	if !r.URL.IsAbs() && r.URL.Path == RefusalsPath && r.Method != http.MethodConnect {
		e.feed.ServeHTTP(rw, r.WithContext(ctx))
		return
	}
	if r.URL.Path == GitGrantPath && !r.URL.IsAbs() && r.Method != http.MethodConnect {
		e.serveGrant(rw, r)
		return
	}
	t, err := requestTarget(r)
	if err != nil {
		badRequest(rw, err.Error())
		return
	}
	cred := e.credentialFor(r, &t)
	addrs, ok := e.admit(ctx, rw, r, t)
	if !ok {
		return
	}
	e.side.log.Debug("egress allowed", "host", t.host(), "port", t.port, "method", r.Method)
	if r.Method == http.MethodConnect {
		e.connect(ctx, rw, t, addrs)
		return
	}
	e.forward(ctx, rw, r, resolved{t.String(), addrs, ctx}, t, cred)
}

// requestTarget is what r asks to reach: a CONNECT's host:port, or an
// absolute http:// URL's (port 80 by default). Anything else is an error
// whose text the 400 answer says.
func requestTarget(r *http.Request) (target, error) {
	var host, port string
	if r.Method == http.MethodConnect {
		auth := r.RequestURI
		h, p, err := net.SplitHostPort(auth)
		if err != nil || h == "" || strings.ContainsAny(auth, "/?#@") {
			return target{}, fmt.Errorf("CONNECT wants host:port, got %q", auth)
		}
		host, port = h, p
	} else {
		u := r.URL
		switch {
		case !u.IsAbs() || u.Host == "":
			return target{}, fmt.Errorf("%s %s: this is a proxy: want CONNECT host:port, or an absolute http:// URL", r.Method, r.RequestURI)
		case u.Scheme != "http":
			return target{}, fmt.Errorf("%s %s: scheme %q: want http (for https, CONNECT)", r.Method, r.RequestURI, u.Scheme)
		case u.User != nil:
			return target{}, errors.New("a URL with user information")
		}
		host, port = u.Hostname(), u.Port()
		if port == "" {
			port = "80"
		}
	}
	t, err := parseTarget(host, port)
	if err != nil {
		return target{}, fmt.Errorf("%s: %v", host, err)
	}
	return t, nil
}

// credentialFor returns the credential for a plain HTTP request to port
// 80 of a host with one for this worker, or nil. Such a request goes
// upstream as HTTPS to the credential's port, the credential added: t
// becomes that upstream, which is what is checked and dialled.
func (e *egress) credentialFor(r *http.Request, t *target) *credential {
	if r.Method == http.MethodConnect || t.port != 80 {
		return nil
	}
	id, project := e.w.scope()
	cred := e.policy.creds.current().lookup(t.host(), id, project)
	if cred != nil {
		t.port = cred.host.port
	}
	return cred
}

// admit checks t against the allowlist in force and resolves it: it
// returns the addresses to dial, or answers the request (403 refused, 502
// unresolved) and reports false.
func (e *egress) admit(ctx context.Context, rw http.ResponseWriter, r *http.Request, t target) ([]netip.Addr, bool) {
	if !e.allows(t) {
		e.refuse(rw, r, t, "is not on the worker's egress allowlist")
		return nil, false
	}
	addrs, err := e.policy.resolve(ctx, t)
	if le, ok := errors.AsType[*localError](err); ok {
		e.side.log.Info("egress: a name resolved to local addresses", "host", t.host(), "addrs", fmt.Sprint(le.addrs))
		e.refuse(rw, r, t, le.Error())
		return nil, false
	}
	if err != nil {
		// The resolver's error names the host's resolver: logged, and
		// not said to the container.
		e.side.stats.dialErrors.Add(1)
		e.side.log.Warn("egress resolve", "host", t.host(), "port", t.port, "err", err)
		http.Error(rw, fmt.Sprintf("agentvisor gateway: %s: the name does not resolve", printable(t.String())), http.StatusBadGateway)
		return nil, false
	}
	e.side.stats.egressAllowed.Add(1)
	return addrs, true
}

// forward passes a plain HTTP request on to rs's addresses, through the
// credentialed proxy when cred is not nil.
func (e *egress) forward(ctx context.Context, rw http.ResponseWriter, r *http.Request, rs resolved, t target, cred *credential) {
	ctx = context.WithValue(ctx, addrsKey{}, rs)
	r.URL.Host = t.String()
	if cred == nil {
		e.rp.ServeHTTP(rw, r.WithContext(ctx))
		return
	}
	if r.Method == http.MethodTrace || strings.EqualFold(r.Method, "TRACK") {
		// A server that echoes the request would hand the credential back.
		e.refuse(rw, r, t, "is credentialed: TRACE would echo the credential")
		return
	}
	if isReceivePack(r) {
		body, ok := e.guardPush(rw, r, t)
		if !ok {
			return
		}
		defer body.Close()
	}
	e.side.stats.egressCredentialed.Add(1)
	r.URL.Scheme = "https"
	e.crp.ServeHTTP(rw, r.WithContext(context.WithValue(ctx, credKey{}, cred)))
}

func badRequest(rw http.ResponseWriter, msg string) {
	rw.Header().Set("Connection", "close")
	http.Error(rw, "agentvisor gateway: "+msg, http.StatusBadRequest)
}

// refuse answers 403 naming t, counts and logs it, and keeps it in the
// worker's refusal log for its wrapper to publish.
func (e *egress) refuse(rw http.ResponseWriter, r *http.Request, t target, why string) {
	e.side.stats.egressRefused.Add(1)
	e.side.log.Info("egress refused", "host", t.host(), "port", t.port, "why", why)
	e.side.refused(Refusal{Tool: protocol.RefusedToolNetwork, Code: protocol.RefusedEgress, Request: requestLine(r),
		Host: printable(t.host()), Port: int(t.port), Reason: strings.TrimPrefix(why, "is ")})
	rw.Header().Set(RefusedHeader, printable(t.String()))
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("X-Content-Type-Options", "nosniff")
	rw.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(rw, "agentvisor gateway: refused: host %s port %d %s\n", printable(t.host()), t.port, why)
}

// upstreamError answers a plain HTTP request whose upstream failed.
func (e *egress) upstreamError(rw http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the container went away, or the worker closed
	}
	e.side.stats.dialErrors.Add(1)
	e.side.log.Warn("egress upstream", "url", r.URL.Redacted(), "err", err)
	// The error names the addresses dialled: logged, not said; what
	// failed is said.
	http.Error(rw, fmt.Sprintf("agentvisor gateway: %s: %s", printable(r.URL.Host), upstreamFailure(err)), http.StatusBadGateway)
}

// upstreamFailure says what failed of an upstream, without its details:
// the host's certificate, or the host.
func upstreamFailure(err error) string {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return "the host's certificate is not trusted (GATEWAY_UPSTREAM_CA adds a private CA)"
	}
	return "the host does not answer"
}

// requestLine is what r asked, as a refusal names it: CONNECT host:port,
// or the method and the URL (its query left out, as a log would).
func requestLine(r *http.Request) string {
	if r.Method == http.MethodConnect {
		return "CONNECT " + printable(r.RequestURI)
	}
	u := *r.URL
	u.RawQuery, u.User = "", nil
	return printable(r.Method) + " " + printable(u.String())
}
