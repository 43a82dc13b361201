package spawner

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
	token := NewOpsToken()
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
		return func(r *http.Request) { r.AddCookie(&http.Cookie{Name: OpsCookie, Value: v}) }
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
		{"the cookie", "/events", cookie(token), http.StatusOK},
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
	if len(cs) != 1 || cs[0].Name != OpsCookie || cs[0].Value != token || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookie: %+v", cs)
	}
	if resp := get("/", cookie(cs[0].Value)); resp.StatusCode != http.StatusOK {
		t.Errorf("the page with the login's cookie: %d", resp.StatusCode)
	}
}

// ServeOps refuses to serve without a token: there is no open mode.
func TestServeOpsRefusesNoToken(t *testing.T) {
	if _, _, err := ServeOps("127.0.0.1:0", nil, nil, "", nil); err == nil {
		t.Fatal("ServeOps served without a token")
	}
}
