package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
// the list is dialled as it is.
//
// A plain HTTP request for host:80 where host has a credential for the
// worker (credentials.go) is forwarded as HTTPS to the credential's
// host:port, its header added: that upstream is what the allowlist must
// allow.

// RefusedHeader names the host:port of a refused egress request, on its
// 403 answer: the wrapper in the container reads it.
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

// egress is one worker's egress proxy.
type egress struct {
	w   *worker
	log *slog.Logger
	srv *http.Server
	tr  *http.Transport
	rp  *httputil.ReverseProxy
	crp *httputil.ReverseProxy // a credentialed request: HTTPS upstream, the credential added
}

func newEgress(w *worker) *egress {
	e := &egress{w: w, log: w.logger(EgressSocket)}
	errLog := slog.NewLogLogger(e.log.Handler(), slog.LevelDebug)
	e.tr = &http.Transport{
		Proxy:               nil, // never the gateway's own proxy settings
		DialContext:         e.transportDial,
		MaxIdleConns:        16,
		MaxIdleConnsPerHost: 4,
		// Dials, live and idle connections to one upstream, at most: a
		// container that opens and drops requests in a loop cannot make
		// the gateway dial without end.
		MaxConnsPerHost:       w.g.cfg.MaxConns,
		IdleConnTimeout:       60 * time.Second,
		ExpectContinueTimeout: time.Second,
		// What the container asked for is what it gets: no gzip added
		// and undone on its behalf.
		DisableCompression: true,
		// A credentialed request's upstream TLS (ServerName is the
		// request's host, set by the transport).
		TLSClientConfig:     w.g.cfg.UpstreamTLS.Clone(),
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

// serve serves the proxy on l until the worker is closed. The connections
// it accepts are the worker's (counted, bounded by MaxConns, closed with
// it).
func (e *egress) serve(l *unixListener) {
	tl := &trackingListener{unixListener: l, w: e.w}
	for {
		err := e.srv.Serve(tl)
		if e.w.ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
			return
		}
		e.log.Warn("egress proxy", "err", err)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-e.w.ctx.Done():
			return
		}
	}
}

func (e *egress) close() {
	_ = e.srv.Close()
	e.tr.CloseIdleConnections()
}

// trackingListener hands out connections tracked by the worker.
type trackingListener struct {
	*unixListener
	w *worker
}

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.unixListener.Accept()
		if err != nil {
			return nil, err
		}
		l.w.accepted.Add(1)
		if !l.w.track(c, true, true) {
			continue // over MaxConns, or the worker closed: closed already
		}
		return &trackedConn{Conn: c, w: l.w}, nil
	}
}

// trackedConn is a container's connection that leaves the worker's
// connections when closed.
type trackedConn struct {
	net.Conn
	w    *worker
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.w.track(c.Conn, false, true) })
	return err
}

// Read and Write count the bytes of every egress connection, tunnels
// and plain HTTP alike, headers included.
func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.w.bytesUp.Add(int64(n))
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.w.bytesDown.Add(int64(n))
	return n, err
}

func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// ServeHTTP answers one request of the container.
func (e *egress) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			e.log.Error("egress request panicked", "panic", p, "stack", string(debug.Stack()))
			panic(http.ErrAbortHandler) // closes this connection only, quietly
		}
	}()
	// A closed worker ends its requests, dials included.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(e.w.ctx, cancel)
	defer stop()

	var host, port string
	if r.Method == http.MethodConnect {
		auth := r.RequestURI
		h, p, err := net.SplitHostPort(auth)
		if err != nil || h == "" || strings.ContainsAny(auth, "/?#@") {
			badRequest(rw, fmt.Sprintf("CONNECT wants host:port, got %q", auth))
			return
		}
		host, port = h, p
	} else {
		u := r.URL
		switch {
		case !u.IsAbs() || u.Host == "":
			badRequest(rw, fmt.Sprintf("%s %s: this is a proxy: want CONNECT host:port, or an absolute http:// URL", r.Method, r.RequestURI))
			return
		case u.Scheme != "http":
			badRequest(rw, fmt.Sprintf("%s %s: scheme %q: want http (for https, CONNECT)", r.Method, r.RequestURI, u.Scheme))
			return
		case u.User != nil:
			badRequest(rw, "a URL with user information")
			return
		}
		host, port = u.Hostname(), u.Port()
		if port == "" {
			port = "80"
		}
	}
	t, err := parseTarget(host, port)
	if err != nil {
		badRequest(rw, fmt.Sprintf("%s: %v", host, err))
		return
	}
	// A plain HTTP request to port 80 of a host with a credential for
	// this worker goes upstream as HTTPS to the credential's port, the
	// credential added: what is checked and dialled is that upstream.
	var cred *credential
	if r.Method != http.MethodConnect && t.port == 80 {
		spec := e.w.spec()
		if cred = e.w.g.credentials().lookup(t.host(), spec.WorkerID, spec.ProjectID); cred != nil {
			t.port = cred.host.port
		}
	}
	if !e.w.allows(t) {
		e.refuse(rw, t, "is not on the worker's egress allowlist")
		return
	}
	addrs, err := e.resolve(ctx, t)
	if err != nil {
		var le *localError
		if errors.As(err, &le) {
			e.refuse(rw, t, le.Error())
			return
		}
		e.w.dialErrors.Add(1)
		e.log.Warn("egress resolve", "host", t.host(), "port", t.port, "err", err)
		http.Error(rw, fmt.Sprintf("agentvisor gateway: %s: %v", t, err), http.StatusBadGateway)
		return
	}
	e.w.egressAllowed.Add(1)
	e.log.Debug("egress allowed", "host", t.host(), "port", t.port, "method", r.Method)
	if r.Method == http.MethodConnect {
		e.connect(ctx, rw, t, addrs)
		return
	}
	ctx = context.WithValue(ctx, addrsKey{}, resolved{t.String(), addrs, ctx})
	r.URL.Host = t.String()
	if cred != nil && (r.Method == http.MethodTrace || strings.EqualFold(r.Method, "TRACK")) {
		// A server that echoes the request would hand the credential back.
		e.refuse(rw, t, "is credentialed: TRACE would echo the credential")
		return
	}
	if cred != nil {
		e.w.egressCredentialed.Add(1)
		r.URL.Scheme = "https"
		e.crp.ServeHTTP(rw, r.WithContext(context.WithValue(ctx, credKey{}, cred)))
		return
	}
	e.rp.ServeHTTP(rw, r.WithContext(ctx))
}

// credKey carries a credentialed request's credential to the proxy's
// Rewrite and ModifyResponse.
type credKey struct{}

// credentialRewrite makes the upstream request of a credentialed one:
// HTTPS to the credential's host:port (the URL, set already), the Host
// header that host (whatever the container wrote), the credential's
// header set (replacing any the container sent).
func (e *egress) credentialRewrite(pr *httputil.ProxyRequest) {
	c := pr.In.Context().Value(credKey{}).(*credential)
	pr.Out.Host = c.host.host()
	if c.host.port != 443 {
		pr.Out.Host = c.host.String()
	} else if c.host.addr.Is6() {
		pr.Out.Host = "[" + c.host.host() + "]"
	}
	dropProxyHeaders(pr.Out.Header)
	pr.Out.Header.Del(c.header)
	pr.Out.Header.Set(c.header, c.value)
}

// credentialResponse keeps the credential out of the answer's headers
// (an upstream that reflects it), and points a redirect to the same host
// over https back at http://, the way the container reaches it with the
// credential.
func (e *egress) credentialResponse(resp *http.Response) error {
	c := resp.Request.Context().Value(credKey{}).(*credential)
	dropProxyHeaders(resp.Header)
	resp.Header.Del(RefusedHeader)
	for _, h := range []http.Header{resp.Header, resp.Trailer} {
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, c.value) {
					delete(h, k)
					break
				}
			}
		}
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		if u, err := url.Parse(loc); err == nil && u.Scheme == "https" && u.User == nil {
			if t, err := parseTarget(u.Hostname(), cmp.Or(u.Port(), "443")); err == nil &&
				t.host() == c.host.host() && t.port == c.host.port {
				u.Scheme, u.Host = "http", hostForURL(c.host)
				resp.Header.Set("Location", u.String())
			}
		}
	}
	return nil
}

// hostForURL is t's host as a URL's host, port 80 implied.
func hostForURL(t target) string {
	if t.addr.Is6() {
		return "[" + t.host() + "]"
	}
	return t.host()
}

func badRequest(rw http.ResponseWriter, msg string) {
	rw.Header().Set("Connection", "close")
	http.Error(rw, "agentvisor gateway: "+msg, http.StatusBadRequest)
}

// refuse answers 403 naming t, counts and logs it.
func (e *egress) refuse(rw http.ResponseWriter, t target, why string) {
	e.w.egressRefused.Add(1)
	e.log.Info("egress refused", "host", t.host(), "port", t.port, "why", why)
	rw.Header().Set(RefusedHeader, printable(t.String()))
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("X-Content-Type-Options", "nosniff")
	rw.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(rw, "agentvisor gateway: refused: host %s port %d %s\n", printable(t.host()), t.port, why)
}

// printable replaces what is not printable ASCII in s.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

// localError is a name resolved to addresses the egress proxy does not
// dial for a name.
type localError struct {
	name  string
	addrs []netip.Addr
}

func (e *localError) Error() string {
	return fmt.Sprintf("resolves to %v only: loopback, link-local, unspecified or multicast addresses are not dialled for a name (list the IP literal to reach it)", e.addrs)
}

// local reports whether a is an address no name may lead to.
func local(a netip.Addr) bool {
	if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsPrivate() {
		return true
	}
	for _, p := range notForNames {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// notForNames are the ranges besides the private ones (10/8, 172.16/12,
// 192.168/16, fc00::/7) that a name may not lead to: "this network",
// carrier-grade NAT (where some clouds keep their metadata service),
// IPv6 site-local, and the IPv4-in-IPv6 translations of any address.
var notForNames = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fec0::/10"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("2002::/16"),
}

// resolve returns the addresses to dial for t: an IP literal's own, or
// what the resolver says of a name, local addresses left out.
func (e *egress) resolve(ctx context.Context, t target) ([]netip.Addr, error) {
	if t.addr.IsValid() {
		return []netip.Addr{t.addr}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.w.g.cfg.DialTimeout)
	defer cancel()
	hosts, err := e.w.g.resolver(ctx, t.name)
	if err != nil {
		return nil, err
	}
	var addrs, dropped []netip.Addr
	for _, h := range hosts {
		a, err := netip.ParseAddr(h)
		if err != nil {
			continue
		}
		a = a.Unmap()
		if local(a) {
			dropped = append(dropped, a)
			continue
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		if len(dropped) > 0 {
			return nil, &localError{t.name, dropped}
		}
		return nil, fmt.Errorf("%s: no address", t.name)
	}
	return addrs, nil
}

// dial dials port on each of addrs in turn until one answers.
func (e *egress) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, error) {
	var first error
	for _, a := range addrs {
		dctx, cancel := context.WithTimeout(ctx, e.w.g.cfg.DialTimeout)
		c, err := e.w.g.dialEgress(dctx, "tcp", netip.AddrPortFrom(a, port).String())
		cancel()
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// addrsKey carries a plain HTTP request's resolved addresses to the
// transport's dial.
type addrsKey struct{}

type resolved struct {
	hostPort string
	addrs    []netip.Addr
	req      context.Context // the request's: its end ends the dial
}

// transportDial dials addr for the plain HTTP transport: the addresses
// the request was resolved to, or (a dial for another request of the same
// host:port) resolved again with the same checks.
func (e *egress) transportDial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	t, err := parseTarget(host, port)
	if err != nil {
		return nil, err
	}
	if rs, ok := ctx.Value(addrsKey{}).(resolved); ok && rs.hostPort == t.String() {
		// The transport dials on after its request is gone; a container
		// that drops its requests must not leave dials behind.
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(rs.req, cancel)
		defer stop()
		return e.dial(dctx, rs.addrs, t.port)
	}
	if !e.w.allows(t) {
		return nil, fmt.Errorf("%s is not on the worker's egress allowlist", addr)
	}
	addrs, err := e.resolve(ctx, t)
	if err != nil {
		return nil, err
	}
	return e.dial(ctx, addrs, t.port)
}

// upstreamError answers a plain HTTP request whose upstream failed.
func (e *egress) upstreamError(rw http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the container went away, or the worker closed
	}
	e.w.dialErrors.Add(1)
	e.log.Warn("egress upstream", "url", r.URL.Redacted(), "err", err)
	http.Error(rw, fmt.Sprintf("agentvisor gateway: %s: %v", r.URL.Host, err), http.StatusBadGateway)
}

// connect dials t and relays bytes both ways between it and the
// container's connection, once answered 200.
func (e *egress) connect(ctx context.Context, rw http.ResponseWriter, t target, addrs []netip.Addr) {
	up, err := e.dial(ctx, addrs, t.port)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		e.w.dialErrors.Add(1)
		e.log.Warn("egress dial", "host", t.host(), "port", t.port, "err", err)
		http.Error(rw, fmt.Sprintf("agentvisor gateway: %s: %v", t, err), http.StatusBadGateway)
		return
	}
	if !e.w.track(up, true, false) {
		return // the worker closed: up closed
	}
	defer func() {
		up.Close()
		e.w.track(up, false, false)
	}()
	hj, ok := rw.(http.Hijacker)
	if !ok {
		http.Error(rw, "agentvisor gateway: no hijack", http.StatusInternalServerError)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// What the container sent after the CONNECT at once (a TLS
	// ClientHello) is in the server's buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	// c counts the bytes itself (trackedConn).
	var uncounted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				e.log.Error("egress relay panicked", "panic", p, "stack", string(debug.Stack()))
				c.Close()
				up.Close()
			}
		}()
		pipe(up, c, &uncounted)
	}()
	pipe(c, up, &uncounted)
	<-done
}
