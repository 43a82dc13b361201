package gateway

import (
	"cmp"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// A credentialed request on its way out: the credential's header set,
// and kept out of the answer (credentials.go says why the container
// speaks plain HTTP to the gateway for such a host).

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
