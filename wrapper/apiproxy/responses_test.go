package apiproxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// Codex's calls (the Responses API) and Qwen Code's (Chat Completions)
// through the proxy, with a bearer token as the upstream credential
// (OPENAI_API_KEY). The stub sees the real key only, the agent's token
// never leaves the proxy, and the meter counts each answer once, streamed
// or not, its cached input as cache reads.
func TestProxyForwardsAndMetersOpenAIAPIs(t *testing.T) {
	for _, tt := range []struct {
		name, path       string
		streamed, whole  string // request bodies
		streamMark, mark string // what each answer carries
	}{
		{"responses", "/v1/responses",
			`{"model":"m","stream":true,"input":"hi","tools":[{"type":"function","name":"exec_command"}]}`, `{"model":"m","input":"hi"}`,
			`"name":"exec_command"`, `"object":"response"`},
		{"chat-completions", "/v1/chat/completions",
			`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"run_shell_command"}}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			`"name":"run_shell_command"`, `"object":"chat.completion"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stub := startStub(t)
			stub.SetAPIKey("sk-openai-real")
			u := stubmodel.Usage{InputTokens: 300, OutputTokens: 20, CacheReadInputTokens: 700}
			stub.SetScript(stubmodel.Script{Model: "gpt-5-codex", Usage: u, Steps: []stubmodel.Step{
				{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": "ls"}}},
				{Text: "done"},
			}})
			var log usageLog
			p := startProxy(t, Config{Upstream: stub.URL, AuthToken: "sk-openai-real", OnUsage: log.add})
			send := func(body string) (int, string) {
				req, _ := http.NewRequest(http.MethodPost, p.URL+tt.path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+p.Token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			if code, body := send(tt.streamed); code != 200 || !strings.Contains(body, "data: ") || !strings.Contains(body, tt.streamMark) {
				t.Fatalf("streamed answer %d: %q", code, body)
			}
			if code, body := send(tt.whole); code != 200 || !strings.Contains(body, tt.mark) {
				t.Fatalf("JSON answer %d: %q", code, body)
			}
			got, models := log.total()
			if want := (protocol.Usage{Input: 600, CacheRead: 1400, Output: 40}); got != want || len(models) != 2 || models[0] != "gpt-5-codex" {
				t.Fatalf("metered %+v in %v, want %+v in two reports", got, models, want)
			}
			if reqs := stub.Requests(); len(reqs) != 2 || !reqs[0].KeyOK || reqs[0].Path != tt.path {
				t.Fatalf("the stub saw %+v", reqs)
			}
		})
	}
}
