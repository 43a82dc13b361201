package ops

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The operator endpoint lets nothing through without the token: not the
// dashboard, not its stream, not /metrics; a bearer token or the cookie
// /login sets (HttpOnly, SameSite=Strict) let the request through.
func TestOpsEndpointRequiresTheToken(t *testing.T) {
	token := NewToken()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the page") })
	srv := httptest.NewServer(RequireToken(token, page))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, set func(*http.Request)) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if set != nil {
			set(req)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	bearer := func(v string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", v) }
	}
	cookie := func(v string) func(*http.Request) {
		return func(r *http.Request) { r.AddCookie(&http.Cookie{Name: Cookie, Value: v}) }
	}
	for _, c := range []struct {
		name string
		path string
		set  func(*http.Request)
		want int
	}{
		{"the page without a token", "/", nil, http.StatusUnauthorized},
		{"the stream without a token", "/events", nil, http.StatusUnauthorized},
		{"/metrics without a token", "/metrics", nil, http.StatusUnauthorized},
		{"a wrong bearer token", "/metrics", bearer("Bearer " + strings.Repeat("0", len(token))), http.StatusUnauthorized},
		{"an empty bearer token", "/metrics", bearer("Bearer "), http.StatusUnauthorized},
		{"the token as basic credentials", "/metrics", bearer("Basic " + token), http.StatusUnauthorized},
		{"a wrong cookie", "/", cookie("x" + token), http.StatusUnauthorized},
		{"a wrong login", "/login?token=" + token + "x", nil, http.StatusUnauthorized},
		{"the bearer token", "/metrics", bearer("Bearer " + token), http.StatusOK},
		{"the bearer token, scheme in lower case", "/", bearer("bearer " + token), http.StatusOK},
		{"the token as the cookie", "/events", cookie(token), http.StatusUnauthorized},
		{"a forged session", "/events", cookie("ops.00." + strings.Repeat("0", 64)), http.StatusUnauthorized},
		{"a bad operator name", "/login?token=" + token + "&operator=a%20b", nil, http.StatusBadRequest},
	} {
		if resp := get(c.path, c.set); resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	resp := get("/login?token="+token, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].Name != Cookie || strings.Contains(cs[0].Value, token) || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookie: %+v", cs)
	}
	if resp := get("/", cookie(cs[0].Value)); resp.StatusCode != http.StatusOK {
		t.Errorf("the page with the login's cookie: %d", resp.StatusCode)
	}
	// A session of another token is refused.
	other := httptest.NewServer(RequireToken(NewToken(), page))
	defer other.Close()
	req, _ := http.NewRequest(http.MethodGet, other.URL+"/", nil)
	req.AddCookie(cs[0])
	if resp, err := noRedirect.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session of another token: %v %v", resp.StatusCode, err)
	}
}

// Who acts: the name given at login (else "ops"), or with a bearer token
// the X-Agentvisor-Operator header (else "ops"); a cookie's request
// carries a CSRF token tied to its session, a bearer's none.
func TestOpsOperatorIdentity(t *testing.T) {
	token := NewToken()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, _ := OperatorFrom(r.Context())
		io.WriteString(w, op.Name+" "+op.CSRF)
	})
	srv := httptest.NewServer(RequireToken(token, page))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(q string) *http.Cookie {
		resp, err := noRedirect.Get(srv.URL + "/login?token=" + token + q)
		if err != nil || len(resp.Cookies()) != 1 {
			t.Fatalf("login%s: %v", q, err)
		}
		return resp.Cookies()[0]
	}
	body := func(set func(*http.Request)) string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		set(req)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	alice, anon := login("&operator=alice"), login("")
	a1 := body(func(r *http.Request) { r.AddCookie(alice) })
	a2 := body(func(r *http.Request) { r.AddCookie(alice) })
	o := body(func(r *http.Request) { r.AddCookie(anon) })
	if !strings.HasPrefix(a1, "alice ") || len(a1) < 40 || a1 != a2 || !strings.HasPrefix(o, "ops ") || o[4:] == a1[6:] {
		t.Errorf("sessions: %q %q %q", a1, a2, o)
	}
	b := body(func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set(OperatorHeader, "deploy-bot")
	})
	if b != "deploy-bot " {
		t.Errorf("bearer with a name: %q", b)
	}
	if b := body(func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }); b != "ops " {
		t.Errorf("bearer: %q", b)
	}
}

// Serve refuses to serve without a token: there is no open mode.
func TestServeRefusesNoToken(t *testing.T) {
	if _, _, err := Serve("127.0.0.1:0", nil, nil, "", nil); err == nil {
		t.Fatal("Serve served without a token")
	}
}
