package worker

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// TestModelAPIOnlyThroughTheProxy runs the real CLIs against a stub model
// that takes only the real key: every call of the agent arrives with the
// real key, added by the wrapper's proxy, and the agent, asked by a
// scripted shell tool call to print its environment and Droid's settings,
// holds neither the key nor the Redis URL, only the proxy's URL and token.
func TestModelAPIOnlyThroughTheProxy(t *testing.T) {
	for _, agentType := range realAgentTypes {
		t.Run(string(agentType), func(t *testing.T) {
			t.Parallel()
			e, stub, environ := realAgentEnv(t, agentType)
			const realKey = "sk-stub-key-0123456789" // realAgentEnv's ANTHROPIC_API_KEY
			stub.SetAPIKey(realKey)
			var err error // the worst case: the agent may run anything
			if e.cfg.AllowedCommands, err = protocol.ParseAllowedCommandsEnv("*"); err != nil {
				t.Fatal(err)
			}
			e.start(environ...)
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
				{ToolUse: shellTool(agentType, lingering(agentType, envProbe))},
				{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"},
			}})
			e.send(e.keys.Input(e.cfg.WorkerID), protocol.Task{RequestID: "snoop", Prompt: "Print your environment."})
			if o := e.waitOutputs(e.keys.Output(e.cfg.WorkerID), 1, 60*time.Second)[0]; o.Status != protocol.StatusComplete {
				t.Fatalf("output %+v (error %+v)", o, o.Error)
			}
			if refused := stub.OtherRequests(); len(refused) != 0 {
				t.Errorf("the stub refused or did not serve: %q", refused)
			}
			reqs := stub.Requests()
			if len(reqs) < 2 {
				t.Fatalf("%d requests reached the stub", len(reqs))
			}
			for i, r := range reqs {
				if !r.KeyOK {
					t.Errorf("request %d arrived without the real key", i)
				}
			}
			seen := requestCarrying(t, reqs, "WORKER_PROGRESS_URL=") // the tool's output, as the model got it
			if !strings.Contains(seen, "WORKER_PROGRESS_URL=") {
				t.Fatalf("the tool's output did not reach the model:\n%s", seen)
			}
			redisURL, _ := url.Parse(e.cfg.RedisURL)
			for _, secret := range []string{realKey, "REDIS_URL", redisURL.Host, stub.URL} {
				if strings.Contains(seen, secret) {
					t.Errorf("the agent saw %q:\n%s", secret, seen)
				}
			}
			if !strings.Contains(seen, "agentvisor-proxy-") {
				t.Errorf("the agent did not get the proxy's token:\n%s", seen)
			}
			for i, r := range reqs {
				for name, values := range r.Header {
					for _, v := range values {
						if strings.Contains(v, "agentvisor-proxy-") {
							t.Errorf("request %d: the proxy's token reached the upstream in %s", i, name)
						}
					}
				}
			}
		})
	}
}

// envProbe prints the agent's environment and Droid's settings, each
// line cut to 300 bytes: the test runner's own environment (a CI's may be
// large) must not make the output long enough for an agent to shorten or
// summarize it before the model sees it.
const envProbe = `env | cut -c1-300; cat "$HOME/.factory/settings.json" 2>&1 | cut -c1-300`

func TestAgentEnvHoldsNoSecret(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/home/worker", "REDIS_URL=redis://:pw@h:1/0", "INSTRUCTIONS=x",
		"ANTHROPIC_API_KEY=sk-real", "ANTHROPIC_AUTH_TOKEN=tok-real", "ANTHROPIC_BASE_URL=https://api.anthropic.com",
		"OPENAI_API_KEY=sk-openai", "FACTORY_API_KEY=fk-real", "DROID_BASE_URL=http://model", "ALLOWED_COMMANDS=*",
		"AGENT_ARGS=--x", "GITHUB_TOKEN=gh-for-the-agent"}
	tests := []struct {
		name         string
		agent        protocol.AgentType
		droidURL     string
		want, absent []string
	}{
		{"claude", protocol.AgentClaude, "", []string{"ANTHROPIC_BASE_URL=http://127.0.0.1:9", "ANTHROPIC_API_KEY=agentvisor-proxy-t", "GITHUB_TOKEN=gh-for-the-agent", "HOME=/home/worker"},
			[]string{"sk-real", "tok-real", "api.anthropic.com", "sk-openai", "fk-real", "redis://", "ALLOWED_COMMANDS", "AGENT_ARGS", "INSTRUCTIONS", "http://model"}},
		{"droid with a custom model", protocol.AgentDroid, "http://model", []string{"GITHUB_TOKEN=gh-for-the-agent"},
			[]string{"sk-real", "tok-real", "sk-openai", "fk-real", "redis://", "http://model", "ANTHROPIC_"}},
		{"droid on Factory's service", protocol.AgentDroid, "", []string{"FACTORY_API_KEY=fk-real"},
			[]string{"sk-real", "tok-real", "sk-openai", "redis://", "ANTHROPIC_"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{WorkerID: "w1", AgentType: tt.agent, DroidBaseURL: tt.droidURL}
			if tt.agent == protocol.AgentClaude || tt.droidURL != "" {
				c.model = modelAPI{url: "http://127.0.0.1:9", token: "agentvisor-proxy-t"}
			}
			ad, err := agent.New(c.AgentType, c.agentSettings())
			if err != nil {
				t.Fatal(err)
			}
			env := strings.Join(c.AgentEnv(ad, base, "http://127.0.0.1:8/progress", "ptok", protocol.Task{RequestID: "r1"}), "\n")
			for _, w := range tt.want {
				if !strings.Contains(env, w) {
					t.Errorf("the agent's environment lacks %q:\n%s", w, env)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(env, a) {
					t.Errorf("the agent's environment holds %q:\n%s", a, env)
				}
			}
		})
	}
}

// CREDENTIAL_HOSTS points the agent's git at http://host/ for those
// hosts, through the egress front only (without it http:// would be
// plain HTTP on the network), after a spec's own GIT_CONFIG_* entries;
// CREDENTIAL_HOSTS itself is the wrapper's.
func TestAgentEnvCredentialHosts(t *testing.T) {
	c, err := FromEnv(mapEnv(map[string]string{"WORKER_ID": "w1", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "claude",
		"CREDENTIAL_HOSTS": "Git.Example.Test, 10.0.0.1,[::1]"}))
	if err != nil || !slices.Equal(c.CredentialHosts, []string{"git.example.test", "10.0.0.1", "[::1]"}) {
		t.Fatalf("%v %v", c.CredentialHosts, err)
	}
	if _, err := FromEnv(mapEnv(map[string]string{"WORKER_ID": "w1", "REDIS_URL": "redis://127.0.0.1:1/0", "AGENT_TYPE": "claude",
		"CREDENTIAL_HOSTS": "git.example.test/x"})); err == nil || !strings.Contains(err.Error(), "CREDENTIAL_HOSTS") {
		t.Fatalf("a bad host: %v", err)
	}
	ad, err := agent.New(c.AgentType, c.agentSettings())
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"PATH=/bin", "CREDENTIAL_HOSTS=git.example.test", "GIT_CONFIG_COUNT=1",
		"GIT_CONFIG_KEY_0=core.autocrlf", "GIT_CONFIG_VALUE_0=false"}
	env := c.AgentEnv(ad, base, "http://127.0.0.1:8/progress", "ptok", protocol.Task{RequestID: "r1"})
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "CREDENTIAL_HOSTS=") }) ||
		!slices.Contains(env, "GIT_CONFIG_COUNT=1") || slices.Contains(env, "GIT_CONFIG_KEY_1=url.http://git.example.test/.insteadOf") {
		t.Fatalf("without the egress front: %q", env)
	}
	c.egress = []string{"HTTP_PROXY=http://127.0.0.1:7"}
	env = c.AgentEnv(ad, base, "http://127.0.0.1:8/progress", "ptok", protocol.Task{RequestID: "r1"})
	for _, want := range []string{"GIT_CONFIG_KEY_0=core.autocrlf", "GIT_CONFIG_VALUE_0=false",
		"GIT_CONFIG_KEY_1=url.http://git.example.test/.insteadOf", "GIT_CONFIG_VALUE_1=https://git.example.test/",
		"GIT_CONFIG_KEY_3=url.http://[::1]/.insteadOf", "GIT_CONFIG_COUNT=4"} {
		if !slices.Contains(env, want) {
			t.Errorf("no %s in %q", want, env)
		}
	}
	n := 0
	for _, kv := range env {
		if strings.HasPrefix(kv, "GIT_CONFIG_COUNT=") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d GIT_CONFIG_COUNT in %q", n, env)
	}
}
