package worker

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/apiproxy"
)

// The agent is untrusted: it never holds the wrapper's
// configuration or a model API key. It gets the model API through the
// wrapper's loopback proxy (package apiproxy), with the proxy's URL and a
// token that only that proxy takes.

// wrapperOnly are variables of the wrapper's environment that the agent
// does not get: its secrets (the Redis URL, the model API credentials and
// base URLs, replaced by the proxy's), and its own configuration, which the
// agent has no use for, unless its adapter keeps one (Adapter.KeepsEnv:
// Droid's FACTORY_API_KEY, its login to Factory). Whatever else is in the environment (such as a
// spec's variables meant for the agent's tools) passes on.
var wrapperOnly = map[string]bool{
	"REDIS_URL": true, "MODEL_SOCKET_TOKEN": true, "INSTRUCTIONS": true, "CREDENTIAL_HOSTS": true,
	"ANTHROPIC_API_KEY": true, "ANTHROPIC_AUTH_TOKEN": true, "ANTHROPIC_BASE_URL": true,
	"OPENAI_API_KEY": true, "OPENAI_BASE_URL": true, "DROID_BASE_URL": true, "FACTORY_API_KEY": true,
	"WORKER_KIND": true, "WORKER_KEY_PREFIX": true, "AGENT_TYPE": true, "AGENT_BIN": true, "AGENT_ARGS": true,
	"AGENT_MODEL": true, "AGENT_SKIP_PERMISSIONS": true, "AGENT_JSON_SCHEMA": true, "AGENT_PERSISTENT": true,
	"AGENT_PTY": true, "ALLOWED_COMMANDS": true, "TASK_TIMEOUT": true, "STALL_TIMEOUT": true,
	"AGENT_RECYCLE_TASKS": true, "AGENT_RECYCLE_RSS": true, "APPROVAL_TIMEOUT": true, "HEARTBEAT_INTERVAL": true,
	"SHUTDOWN_GRACE": true, "RESULT_GRACE": true, "KILL_GRACE": true, "PROGRESS_ADDR": true, "EVENT_BUFFER": true,
	"PAUSE_AFTER_OUTPUT": true, protocol.EnvStreamMaxLen: true, protocol.EnvRunRetention: true,
	"SESSION_POLICY": true, "SESSION_CONTEXT_THRESHOLD": true, "SESSION_STALE_AFTER": true,
	"SESSION_AFFINITY": true, "SESSION_SUMMARIZE": true, "LOG_LEVEL": true,
	protocol.EnvMCPServers: true, envMCPTimeout: true, protocol.EnvWorkerHost: true, protocol.EnvModelPrices: true,
	protocol.EnvGitDefault: true,
}

// modelAPI is the model API as the agent sees it: the proxy's base URL and
// token; empty when the agent talks to its vendor itself (Droid without
// DROID_BASE_URL). Set by Run before the first agent starts.
type modelAPI struct{ url, token string }

// modelProxyParams are what the model API proxy is started with.
type modelProxyParams struct {
	agent       agent.Adapter
	getenv      func(string) string // the wrapper's environment
	log         *slog.Logger
	heal        *healer
	spend       *spending
	redact      *Redactor
	socket      string // MODEL_SOCKET
	socketToken string // MODEL_SOCKET_TOKEN
}

// startModelProxy starts the proxy between the agent and the model API, to
// the upstream its adapter routes it to (Adapter.Route), with the real
// credential of the wrapper's environment (ANTHROPIC_API_KEY, or
// ANTHROPIC_AUTH_TOKEN as a bearer token; the route's own credential when
// it names one, as Codex's OPENAI_API_KEY). It returns nil for an agent
// that talks to its vendor by itself; else the proxy and the model API as
// the agent sees it.
func startModelProxy(pp modelProxyParams) (*apiproxy.Proxy, modelAPI, error) {
	get := pp.getenv
	cfg := apiproxy.Config{APIKey: get("ANTHROPIC_API_KEY"), AuthToken: get("ANTHROPIC_AUTH_TOKEN"), Logger: pp.log,
		OnUpstreamError: pp.heal.upstreamError, OnRateLimit: pp.heal.rateLimit, UpstreamSocket: pp.socket, UpstreamToken: pp.socketToken}
	// Every model call through the proxy is metered and gated, whoever
	// in the container made it (cost.go); refusals are the task's
	// warnings.
	cfg.OnUsage, cfg.Refuse, cfg.OnRefused = pp.spend.meter, pp.spend.refuse, pp.spend.refused
	route := pp.agent.Route(get)
	if !route.Proxied {
		return nil, modelAPI{}, nil
	}
	cfg.Upstream = route.Upstream
	if c := route.Credential; c != nil { // another vendor's key (Codex: OPENAI_API_KEY)
		cfg.APIKey, cfg.AuthToken = c.APIKey, c.AuthToken
	}
	p, err := apiproxy.Start("127.0.0.1:0", cfg)
	if err != nil {
		return nil, modelAPI{}, fmt.Errorf("model API proxy: %w", err)
	}
	// The token is good for this proxy only, but for anyone who can reach
	// its port: it is redacted like the secrets it stands for.
	pp.redact.secrets = append(pp.redact.secrets, p.Token)
	if t := pp.socketToken; t != "" { // the agent never sees it: redacted should it turn up
		pp.redact.secrets = append(pp.redact.secrets, t)
	}
	return p, modelAPI{url: p.URL, token: p.Token}, nil
}

// envLookup reads variables of an environment (the wrapper's).
func envLookup(environ []string) func(string) string {
	return func(name string) string {
		for _, kv := range environ {
			if v, ok := strings.CutPrefix(kv, name+"="); ok {
				return v
			}
		}
		return ""
	}
}
