package apiproxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/testkit"
)

// With an upstream socket (a sealed worker's gateway) every model call
// goes through it, even with an HTTP proxy in the environment; the
// upstream still sees the real key and the host its URL names.
func TestUpstreamThroughSocket(t *testing.T) {
	stub := startStub(t)
	path, accepted := testkit.UnixRelay(t, strings.TrimPrefix(stub.URL, "http://"))
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1") // nothing listens there: a call through it fails
	// The upstream's name never resolves: only the socket is dialled.
	p := startProxy(t, Config{Upstream: "http://model.invalid:8080", APIKey: realKey, UpstreamSocket: path})
	resp, body := post(t, p.URL, map[string]string{"X-Api-Key": p.Token}, streamBody)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "event: message_stop") {
		t.Fatalf("through the socket: %s\n%s", resp.Status, body)
	}
	if reqs := stub.Requests(); len(reqs) != 1 || !reqs[0].KeyOK {
		t.Fatalf("the stub saw %+v, want one request with the real key", reqs)
	}
	if accepted() == 0 {
		t.Fatal("the socket saw no connection")
	}
}
