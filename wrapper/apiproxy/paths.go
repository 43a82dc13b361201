package apiproxy

import (
	"net/http"
	"strings"
)

// The proxy serves the model APIs' own endpoints, and nothing else of the
// upstream: the agent holds the proxy's token, and a call of another
// path with the operator's credential put in (an account's settings, its
// keys, a batch, a file upload) is no model call of a task's. The
// endpoints are those of the APIs the adapters route to (the Messages
// API; OpenAI's Responses and Chat Completions APIs), relative to the
// proxy's URL, which stands for the upstream's base.

// modelEndpoint says whether method and path are a model API call the
// proxy forwards.
func modelEndpoint(method, path string) bool {
	switch method {
	case http.MethodPost:
		switch path {
		case "/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/v1/chat/completions":
			return true
		}
	case http.MethodGet, http.MethodHead:
		// The models listing and one model's description: what an agent
		// asks to check the model it was given.
		if path == "/v1/models" {
			return true
		}
		id, ok := strings.CutPrefix(path, "/v1/models/")
		return ok && id != "" && !strings.Contains(id, "/")
	}
	return false
}
