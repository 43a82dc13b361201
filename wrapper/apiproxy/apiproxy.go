// Package apiproxy is the wrapper's loopback reverse proxy for the model
// API. The agent never holds the real API key: it gets the proxy's URL and
// a random token that only this proxy takes. The proxy checks the token,
// replaces it with the real credential and forwards the request to the
// configured upstream, path and all, for the model APIs' own endpoints
// only (paths.go: the Anthropic Messages API, the OpenAI Responses and
// Chat Completions APIs); answers, server-sent events included, stream
// back unbuffered. A gate (Config.Refuse) may refuse a call: outside any
// task, past a budget.
package apiproxy

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
)

// DefaultUpstream is the Anthropic API, where requests go when no
// ANTHROPIC_BASE_URL is configured.
const DefaultUpstream = "https://api.anthropic.com"

// Config is what the proxy forwards to and with which credential. At most
// one of APIKey and AuthToken is used: APIKey when both are set.
type Config struct {
	Upstream string // base URL of the model API, e.g. https://api.anthropic.com
	// UpstreamSocket, when set, is a unix socket every upstream request
	// goes through: a sealed worker's model.sock, where the host's gateway
	// takes plain HTTP and forwards it to the model API over HTTPS. Each
	// request then carries UpstreamToken (the worker's token, in the
	// header gateway.ModelTokenHeader), without which the gateway refuses
	// it; Upstream's scheme and host are the gateway's business, its path
	// still prefixes every request's.
	UpstreamSocket string
	UpstreamToken  string
	// TLS configures the TLS spoken to an https Upstream (nil: the
	// system's roots). For tests and embedding.
	TLS       *tls.Config
	APIKey    string // sent upstream as x-api-key (ANTHROPIC_API_KEY)
	AuthToken string // sent upstream as Authorization: Bearer (ANTHROPIC_AUTH_TOKEN)
	Logger    *slog.Logger
	// OnUpstreamError, when set, sees the status and headers of every
	// error answer (4xx, 5xx) of the upstream, before the agent does: the
	// wrapper stops a task at the first 401 or 403 (the proxy's own
	// refusals of a wrong token are not the upstream's and do not count).
	// It must not block.
	OnUpstreamError func(status int, header http.Header)
	// OnRateLimit, when set, decides whether a rate-limited answer (429,
	// 529) parks its request until the reset time the upstream gave
	// (RetryAt) and sends it again, instead of passing it on. It may block
	// only briefly.
	OnRateLimit RateLimitFunc
	// OnUsage, when set, meters the model's answers: it sees the tokens of
	// every successful model call as they stream to the agent (usage.go).
	OnUsage UsageFunc
	// Refuse, when set, may refuse a model call before it is forwarded
	// (no task in flight, the task's budget spent).
	Refuse RefuseFunc
	// OnRefused, when set, sees every request the proxy refused (a path
	// that is not the model API's, a call Refuse refused; not a request
	// without the proxy's token, which is nobody's call), after it was
	// answered. It must not block.
	OnRefused func(Refusal)
}

// Refusal is a request of the agent the proxy refused, with the stable
// code its answer carries (error.code, and the header RefusedCodeHeader).
type Refusal struct {
	Code    string // protocol.RefusedModelPath, RefusedModelNoTask, RefusedModelOverBudget
	Request string // method and path
	Reason  string
}

// RefusedCodeHeader carries the code of a request the proxy refused.
const RefusedCodeHeader = "X-Agentvisor-Refused-Code"

// Proxy is a running proxy.
type Proxy struct {
	// URL is the proxy's base URL (http://127.0.0.1:port), what the agent
	// gets as its API base URL.
	URL string
	// Token is the only credential the proxy accepts, as x-api-key or as
	// Authorization: Bearer; what the agent gets as its API key.
	Token string

	upstream *url.URL
	cfg      Config
	rp       *httputil.ReverseProxy
	srv      *http.Server
	log      *slog.Logger
}

// Start listens on addr (a loopback address; "127.0.0.1:0" picks a free
// port) and serves until Close.
func Start(addr string, cfg Config) (*Proxy, error) {
	if cfg.Upstream == "" {
		cfg.Upstream = DefaultUpstream
	}
	up, err := url.Parse(cfg.Upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, fmt.Errorf("apiproxy: upstream %q is not an http(s) URL", redactURL(cfg.Upstream))
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("apiproxy: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("apiproxy: address %q is not a loopback address", addr)
	}
	if cfg.UpstreamSocket != "" {
		if cfg.UpstreamToken == "" {
			return nil, errors.New("apiproxy: an upstream socket without its token (MODEL_SOCKET_TOKEN): the gateway would refuse every call")
		}
		// Plain HTTP to the gateway, which speaks TLS to the model.
		sealed := *up
		sealed.Scheme = "http"
		up = &sealed
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("apiproxy: listen: %w", err)
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), Token: NewToken(), upstream: up, cfg: cfg, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		FlushInterval: -1, // server-sent events reach the agent as the upstream writes them
		Transport:     &parkingTransport{next: newTransport(cfg.UpstreamSocket, cfg.TLS), limited: cfg.OnRateLimit, now: time.Now},
		ErrorHandler:  p.upstreamError,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode >= 400 && cfg.OnUpstreamError != nil {
				cfg.OnUpstreamError(resp.StatusCode, resp.Header)
			}
			p.meter(resp)
			return nil
		},
		BufferPool: &bufferPool{},
	}
	// No write timeout: an answer streams as long as the model writes.
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the proxy; requests in flight are cut.
func (p *Proxy) Close() error { return p.srv.Close() }

// NewToken returns a random token for the agent: 32 bytes in hex, with a
// prefix that says what it is when it turns up somewhere.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "agentvisor-proxy-" + hex.EncodeToString(b)
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		p.log.Warn("model API proxy: request without the agent's token refused", "method", r.Method, "path", r.URL.Path)
		writeError(w, http.StatusUnauthorized, "authentication_error", "agentvisor model API proxy: invalid or missing token")
		return
	}
	if !modelEndpoint(r.Method, r.URL.Path) {
		p.refuse(w, r, http.StatusNotFound, "not_found_error", Refusal{Code: protocol.RefusedModelPath,
			Reason: "not a model API endpoint: the proxy serves POST /v1/messages, /v1/messages/count_tokens, /v1/responses, /v1/chat/completions and GET /v1/models[/id] only"})
		return
	}
	if p.cfg.Refuse != nil && isModelCall(r) {
		if code, msg := p.cfg.Refuse(); code != "" {
			status, typ := http.StatusBadRequest, "invalid_request_error" // a spent budget: the agent ends its turn
			if code == protocol.RefusedModelNoTask {
				status, typ = http.StatusForbidden, "permission_error"
			}
			p.refuse(w, r, status, typ, Refusal{Code: code, Reason: msg})
			return
		}
	}
	p.rp.ServeHTTP(w, r)
}

// refuse answers a request of the agent the proxy does not forward, in
// the API's error shape with the refusal's code, and tells OnRefused.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, status int, typ string, rf Refusal) {
	rf.Request = r.Method + " " + r.URL.Path
	p.log.Warn("model API proxy: request refused", "code", rf.Code, "method", r.Method, "path", r.URL.Path)
	w.Header().Set(RefusedCodeHeader, rf.Code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "code": rf.Code,
		"message": "agentvisor model API proxy: " + rf.Code + ": " + rf.Reason}})
	if p.cfg.OnRefused != nil {
		p.cfg.OnRefused(rf)
	}
}

// authorized says whether r carries the proxy's token, as x-api-key or as
// a bearer token.
func (p *Proxy) authorized(r *http.Request) bool {
	got := r.Header.Get("X-Api-Key")
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && got == "" {
		got = bearer
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(p.Token)) == 1
}

// rewrite sends the request to the upstream with the real credential in
// place of the agent's token.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.upstream)
	pr.Out.Header.Del("X-Api-Key")
	pr.Out.Header.Del("Authorization")
	pr.Out.Header.Del(gateway.ModelTokenHeader)
	if p.cfg.UpstreamSocket != "" {
		pr.Out.Header.Set(gateway.ModelTokenHeader, p.cfg.UpstreamToken)
	}
	if p.cfg.OnUsage != nil {
		// The transport then asks for gzip itself and decodes the answer,
		// so the meter reads it; the agent gets it plain, on loopback.
		pr.Out.Header.Del("Accept-Encoding")
		if isModelCall(pr.In) {
			// The call outlives a client that hangs up: the upstream bills
			// the whole answer, which the meter reads to its end
			// (usageReader.Close).
			pr.Out = pr.Out.WithContext(context.WithoutCancel(pr.In.Context()))
		}
	}
	switch {
	case p.cfg.APIKey != "":
		pr.Out.Header.Set("X-Api-Key", p.cfg.APIKey)
	case p.cfg.AuthToken != "":
		pr.Out.Header.Set("Authorization", "Bearer "+p.cfg.AuthToken)
	}
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) { // the agent went away
		return
	}
	p.log.Warn("model API proxy: upstream unreachable", "path", r.URL.Path, "err", err)
	writeError(w, http.StatusBadGateway, "api_error", "agentvisor model API proxy: upstream unreachable")
}

// bufferPool reuses the proxy's copy buffers (32 KiB each, one per
// answer otherwise), sparing the garbage collector on every call.
type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.pool.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.pool.Put(&buf) }

// newTransport is http.DefaultTransport's settings, with more idle
// connections kept per host: every request goes to the one upstream;
// through socket when one is given, and then never through an HTTP proxy.
func newTransport(socket string, tlsConfig *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 16
	if tlsConfig != nil {
		t.TLSClientConfig = tlsConfig.Clone()
	}
	if socket != "" {
		t.Proxy = nil
		t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}
	}
	return t
}

// writeError answers in the Messages API's error shape, which the agents
// parse.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

// redactURL drops the user information of a URL for an error message.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	return u.String()
}
