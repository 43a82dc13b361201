package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// The model proxy: Dir/{id}/model.sock is a reverse proxy (HTTP over the
// unix socket) to the model API, Config.Model, for worker id alone. Every
// request must carry the worker's token (WorkerSpec.ModelToken) in the
// header ModelTokenHeader: the manager makes it at the worker's creation
// and gives it to the gateway and to the worker's wrapper, whose
// environment the agent cannot read. A request without it, or with
// another, is answered 403 and counted (WorkerStats.ModelRefused); a
// worker opened without a token has every request refused. So the agent,
// which can connect to model.sock as well as the wrapper, reaches no
// model API through it, whatever key it holds: model calls go through
// the wrapper's proxy, metered and budgeted.
//
// A request that passes loses the token header and is forwarded, method,
// path, query, headers and body as they came, to Config.Model over HTTPS
// (the gateway verifies the server: Config.UpstreamTLS, the system's
// roots by default), its Host header the model's. The answer streams
// back as it comes, every write flushed (server-sent events).

// ModelTokenHeader carries a worker's token on each request of its
// model.sock.
const ModelTokenHeader = "X-Agentvisor-Worker-Token"

// Bounds on what a container sends model.sock: a request's header within
// modelHeaderTimeout, at most modelMaxHeaderBytes; an idle connection is
// closed after modelIdleTimeout.
var (
	modelHeaderTimeout  = 10 * time.Second
	modelIdleTimeout    = 2 * time.Minute
	modelMaxHeaderBytes = 1 << 20
)

// ParseModel reads Config.Model: host:port (HTTPS), or a URL
// https://host[:port] or http://host[:port] (plain HTTP: a model server on
// the host itself, as tests and the demo's stub have). "" is no model.
func ParseModel(s string) (*url.URL, error) {
	if s == "" {
		return nil, nil
	}
	if !strings.Contains(s, "://") {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("gateway: Model: want host:port or an http(s) URL, got %q", s)
		}
		return &url.URL{Scheme: "https", Host: s}, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("gateway: Model: want host:port or an http(s) URL (scheme and host only), got %q", s)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// modelAPI is the one model upstream every worker's model.sock forwards
// to, and the one transport that carries all their requests (its idle
// connections shared).
type modelAPI struct {
	upstream *url.URL
	tr       *http.Transport
}

// newModelAPI is the model API of Config.Model (nil for ""): never
// through the gateway's own proxy settings, the answer passed on as it
// comes (no gzip asked and undone on the wrapper's behalf: the wrapper
// asks for what it reads).
func newModelAPI(model string, dialTimeout time.Duration, upstreamTLS *tls.Config) (*modelAPI, error) {
	up, err := ParseModel(model)
	if up == nil || err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		TLSClientConfig:       upstreamTLS.Clone(), // nil: the system's roots, ServerName the model's host
		TLSHandshakeTimeout:   10 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &modelAPI{upstream: up, tr: tr}, nil
}

// close drops the transport's idle connections, once no worker serves.
func (a *modelAPI) close() { a.tr.CloseIdleConnections() }

// tokenChecker is the worker whose token a model.sock wants.
type tokenChecker interface {
	modelTokenOK(got string) bool
}

// modelServer is one worker's model.sock server.
type modelServer struct {
	api   *modelAPI
	side  workerSide
	token tokenChecker
	srv   *http.Server
	rp    *httputil.ReverseProxy
}

func newModelServer(api *modelAPI, side workerSide, token tokenChecker) *modelServer {
	m := &modelServer{api: api, side: side, token: token}
	errLog := newErrorLog(side.log)
	m.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(api.upstream) // the model's host in the URL and the Host header
			pr.Out.Header.Del(ModelTokenHeader)
		},
		Transport:     api.tr,
		FlushInterval: -1, // every write of the answer flushed: server-sent events come as sent
		ErrorLog:      errLog,
		ErrorHandler:  m.upstreamError,
	}
	m.srv = &http.Server{
		Handler:                      m,
		ReadHeaderTimeout:            modelHeaderTimeout,
		IdleTimeout:                  modelIdleTimeout,
		MaxHeaderBytes:               modelMaxHeaderBytes,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     errLog,
	}
	return m
}

// serve serves model.sock on l until the worker is closed.
func (m *modelServer) serve(l *unixListener) { serveHTTP(m.side, m.srv, l, "model proxy") }

func (m *modelServer) close() { _ = m.srv.Close() }

func (m *modelServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if !m.token.modelTokenOK(r.Header.Get(ModelTokenHeader)) {
		m.side.stats.modelRefused.Add(1)
		why := "wrong token"
		if r.Header.Get(ModelTokenHeader) == "" {
			why = "no token"
		}
		m.side.log.Warn("model request refused: not the worker's token", "why", why, "method", r.Method, "path", r.URL.Path)
		m.side.refused(Refusal{Tool: protocol.RefusedToolModel, Code: protocol.RefusedModelToken,
			Request: printable(r.Method) + " " + printable(r.URL.Path), Reason: "not the worker's token (" + why + ")"})
		writeModelError(rw, http.StatusForbidden, "permission_error",
			"agentvisor gateway: model.sock takes only the worker's own requests ("+ModelTokenHeader+")")
		return
	}
	m.side.stats.modelForwarded.Add(1)
	m.rp.ServeHTTP(rw, r)
}

func (m *modelServer) upstreamError(rw http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) { // the wrapper went away, or the worker closed
		return
	}
	m.side.stats.dialErrors.Add(1)
	m.side.log.Warn("model API unreachable", "model", m.api.upstream.Host, "path", r.URL.Path, "err", err)
	writeModelError(rw, http.StatusBadGateway, "api_error", "agentvisor gateway: model API unreachable")
}

// writeModelError answers in the Messages API's error shape, which the
// wrapper and the agents parse.
func writeModelError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}
