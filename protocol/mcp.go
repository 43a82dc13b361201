package protocol

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// MCPServer is an MCP server a worker's agent gets: a local program that
// the agent starts and talks to on its stdin and stdout (Command), or a
// server at a URL (streamable HTTP). The wrapper configures the agent CLI
// with it; a server that does not start fails the task with
// MCP_UNAVAILABLE. Neither the env of a command nor the headers of a URL
// are secret from the agent: it runs under the same uid as the servers it
// starts, and reads their configuration.
type MCPServer struct {
	// Name names the server; the agent's tools from it are called
	// mcp__<name>__<tool> (Claude Code).
	Name    string            `json:"name"`
	Command string            `json:"command,omitempty"` // a stdio server's program
	Args    []string          `json:"args,omitempty"`    // its arguments
	Env     map[string]string `json:"env,omitempty"`     // variables added to its environment
	URL     string            `json:"url,omitempty"`     // an HTTP server's address (http or https)
	Headers map[string]string `json:"headers,omitempty"` // sent with every request to URL
}

// EnvMCPServers is the worker variable that carries a spec's mcp_servers
// to the wrapper, as the JSON array of MCPServer. The spawner sets it;
// like every AGENT_ name, a spec's env cannot.
const EnvMCPServers = "AGENT_MCP_SERVERS"

// MaxMCPServers is how many MCP servers a spec may name, and
// MaxMCPServersBytes the size of their JSON (it travels in one environment
// string, which Linux limits to 128 KiB).
const (
	MaxMCPServers      = 16
	MaxMCPServersBytes = 32 << 10
)

// mcpNameRe is what a server name may be: Claude Code builds its tool names
// (mcp__<server>__<tool>) from it, and the API limits tool names to
// letters, digits, _ and -.
var mcpNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func validateMCPServers(path string, servers []MCPServer) error {
	if len(servers) > MaxMCPServers {
		return fieldErr(path, "%d servers, at most %d", len(servers), MaxMCPServers)
	}
	seen := map[string]bool{}
	for i, s := range servers {
		p := fmt.Sprintf("%s[%d]", path, i)
		if !mcpNameRe.MatchString(s.Name) {
			return fieldErr(p+".name", "is %q, want 1 to 64 letters, digits, _ or -", s.Name)
		}
		if seen[s.Name] {
			return fieldErr(p+".name", "%q appears twice", s.Name)
		}
		seen[s.Name] = true
		switch {
		case s.Command == "" && s.URL == "":
			return fieldErr(p, "needs a command (stdio) or a url (HTTP)")
		case s.Command != "" && s.URL != "":
			return fieldErr(p, "has both a command and a url; want one")
		case s.Command != "" && len(s.Headers) > 0:
			return fieldErr(p+".headers", "only for a url")
		case s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0):
			return fieldErr(p, "args and env are for a command, not a url")
		}
		if s.URL != "" {
			u, err := url.Parse(s.URL)
			lower := strings.HasPrefix(s.URL, "http://") || strings.HasPrefix(s.URL, "https://") // as the schema's pattern says
			if err != nil || !lower || u.Host == "" {
				return fieldErr(p+".url", "is %q, want an http:// or https:// URL", s.URL)
			}
		}
		for k := range s.Env {
			if !envNameRe.MatchString(k) {
				return fieldErr(p+".env", "%q is not a valid environment variable name", k)
			}
		}
		for k := range s.Headers {
			if k == "" {
				return fieldErr(p+".headers", "an empty header name")
			}
		}
	}
	if b, _ := json.Marshal(servers); len(b) > MaxMCPServersBytes {
		return fieldErr(path, "is %d bytes of JSON, at most %d", len(b), MaxMCPServersBytes)
	}
	return nil
}

// EncodeMCPServers is the value of EnvMCPServers for servers.
func EncodeMCPServers(servers []MCPServer) (string, error) {
	if err := validateMCPServers("mcp_servers", servers); err != nil {
		return "", err
	}
	b, err := json.Marshal(servers)
	return string(b), err
}

// ParseMCPServersEnv reads and validates the value of EnvMCPServers; an
// empty value is no server.
func ParseMCPServersEnv(v string) ([]MCPServer, error) {
	if v == "" {
		return nil, nil
	}
	var servers []MCPServer
	if err := json.Unmarshal([]byte(v), &servers); err != nil {
		return nil, fmt.Errorf("want a JSON array of MCP servers: %w", err)
	}
	if err := validateMCPServers("mcp_servers", servers); err != nil {
		return nil, err
	}
	return servers, nil
}
