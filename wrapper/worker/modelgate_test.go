package worker

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/wrapper/apiproxy"
)

// The worker's model API proxy, as the worker starts it, against the
// stub model: with no task in flight a model call (anyone in the
// container may make one with the proxy's token) is refused
// MODEL_CALL_OUTSIDE_TASK and reaches no model; a path that is not the
// model API's is refused MODEL_PATH_REFUSED; the models listing passes.
func TestModelProxyRefusesCallsOutsideATask(t *testing.T) {
	stub, err := stubmodel.Start(stubmodel.Script{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	e := newEnv(t, protocol.AgentClaude, protocol.KindDeveloper)
	w, err := New(e.cfg, Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Environ: []string{"ANTHROPIC_BASE_URL=" + stub.URL, "ANTHROPIC_API_KEY=sk-ant-real-5c1d"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	proxy, model, err := startModelProxy(modelProxyParams{agent: w.agent, getenv: envLookup(w.environ), log: w.log, heal: w.heal,
		spend: w.spend, redact: w.redact})
	if err != nil || proxy == nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { proxy.Close() })
	call := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, model.url+path, strings.NewReader(body))
		req.Header.Set("X-Api-Key", model.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, c := range []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"a model call outside a task", "POST", "/v1/messages", http.StatusForbidden, protocol.RefusedModelNoTask},
		{"another vendor's API outside a task", "POST", "/v1/responses", http.StatusForbidden, protocol.RefusedModelNoTask},
		{"an account's keys", "GET", "/v1/organizations/api_keys", http.StatusNotFound, protocol.RefusedModelPath},
		{"a batch", "POST", "/v1/messages/batches", http.StatusNotFound, protocol.RefusedModelPath},
		{"a path that climbs out", "POST", "/v1/messages/../../admin", http.StatusNotFound, protocol.RefusedModelPath},
		{"a file upload", "PUT", "/v1/files", http.StatusNotFound, protocol.RefusedModelPath},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := call(c.method, c.path, `{"model":"claude-stub","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != c.status || resp.Header.Get(apiproxy.RefusedCodeHeader) != c.code || !strings.Contains(body, `"code":"`+c.code+`"`) {
				t.Fatalf("%s %s: %d %s=%q %s, want %d %s", c.method, c.path, resp.StatusCode, apiproxy.RefusedCodeHeader,
					resp.Header.Get(apiproxy.RefusedCodeHeader), body, c.status, c.code)
			}
		})
	}
	if n := len(stub.Requests()); n != 0 {
		t.Errorf("%d refused calls reached the model", n)
	}
	if other := stub.OtherRequests(); len(other) != 0 {
		t.Errorf("refused requests reached the model's host: %v", other)
	}
	// GET /v1/models is the API's and costs nothing: it passes (the stub
	// answers it 404 itself).
	if resp, _ := call("GET", "/v1/models", ""); resp.Header.Get(apiproxy.RefusedCodeHeader) != "" {
		t.Errorf("GET /v1/models refused by the proxy")
	}
}
