package ops

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Cookie is the cookie a browser holds after /login: a session signed
// with a key made from the operator token (session.go), HttpOnly and
// SameSite=Strict (no other site's page can send it).
const Cookie = "agentvisor_ops"

// Serve listens on addr (host:port; port 0 picks one) and serves
// /metrics from the registry metrics, and every other path from page (the dashboard; nil: a
// line pointing at /metrics), until the returned server is closed. It
// returns the address it listens on. Every path but /login requires the
// operator token (RequireToken); an empty token is refused.
func Serve(addr string, metrics *prometheus.Registry, page http.Handler, token string, log *slog.Logger) (*http.Server, string, error) {
	if token == "" {
		return nil, "", errors.New("ops: the endpoint needs an operator token (OPS_TOKEN or OPS_TOKEN_FILE)")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("ops: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{Registry: metrics, Timeout: 10 * time.Second}))
	if page == nil {
		page = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintln(w, "agentvisor worker-manager: /metrics")
		})
	}
	mux.Handle("/", page)
	// A connection left idle goes after a minute (no ReadTimeout: it
	// would end the dashboard's event stream).
	srv := &http.Server{Handler: RequireToken(token, mux), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	return srv, ln.Addr().String(), nil
}

// RequireToken lets a request through to next only with the operator
// token: as a bearer token (`Authorization: Bearer <token>`, what
// Prometheus sends with its authorization setting and what scripts use),
// or as the session cookie (Cookie) a browser got from
// `GET /login?token=<token>[&operator=<name>]`, which sets it and
// redirects to the page. Anything else is 401. The request's context
// then says who makes it (OperatorFrom).
func RequireToken(token string, next http.Handler) http.Handler {
	want := []byte(token)
	ok := func(got string) bool { return got != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 }
	keys := newSessionKeys(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			name := r.URL.Query().Get("operator")
			if name == "" {
				name = DefaultOperator
			}
			if r.Method != http.MethodGet || !ok(r.URL.Query().Get("token")) {
				unauthorized(w)
				return
			}
			if !operatorName.MatchString(name) {
				http.Error(w, "operator: want 1 to 64 letters, digits, '_', '.', '@', '-'", http.StatusBadRequest)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: Cookie, Value: keys.newSession(name), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		if bearer, found := cutPrefixFold(r.Header.Get("Authorization"), "Bearer "); found && ok(bearer) {
			op := Operator{Name: DefaultOperator}
			if name := r.Header.Get(OperatorHeader); operatorName.MatchString(name) {
				op.Name = name
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, op)))
			return
		}
		if c, err := r.Cookie(Cookie); err == nil {
			if name, valid := keys.check(c.Value); valid {
				op := Operator{Name: name, CSRF: keys.csrf(c.Value)}
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, op)))
				return
			}
		}
		unauthorized(w)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="agentvisor"`)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintln(w, "agentvisor worker-manager: this endpoint needs the operator token: "+
		"Authorization: Bearer <token>, or open /login?token=<token> in a browser (OPS_TOKEN, OPS_TOKEN_FILE; "+
		"a manager without either printed a token of its own at start)")
}

// cutPrefixFold is strings.CutPrefix with the prefix matched without
// regard to case (an auth scheme is case-insensitive).
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// NewToken returns a random operator token (32 hex digits).
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
