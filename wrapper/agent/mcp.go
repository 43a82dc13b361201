package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// How a spec's MCP servers (AGENT_MCP_SERVERS) reach the agent CLIs is
// each adapter's (claude.go, droid.go; wrapper/README.md, "MCP servers").
// A server that is not available fails the task with MCP_UNAVAILABLE as
// soon as the agent shows it: Droid before it starts, Claude at its init
// line, which it prints as it sends its first model request (that request
// may be under way when the agent is stopped).

// mcpDocument is the servers in the mcpServers form both CLIs read.
func mcpDocument(servers []protocol.MCPServer) []byte {
	doc := map[string]any{}
	for _, s := range servers {
		if s.URL != "" {
			e := map[string]any{"type": "http", "url": s.URL}
			if len(s.Headers) > 0 {
				e["headers"] = s.Headers
			}
			doc[s.Name] = e
			continue
		}
		args, env := s.Args, s.Env
		if args == nil {
			args = []string{}
		}
		if env == nil {
			env = map[string]string{}
		}
		doc[s.Name] = map[string]any{"type": "stdio", "command": s.Command, "args": args, "env": env}
	}
	b, _ := json.MarshalIndent(map[string]any{"mcpServers": doc}, "", "  ")
	return b
}

// mcpMissing is the error of the init check: MCP_UNAVAILABLE naming each
// missing server and why; nil when none is.
func mcpMissing(missing []string, waited fmt.Stringer) *protocol.Error {
	if len(missing) == 0 {
		return nil
	}
	return protocol.NewError(protocol.CodeMCPUnavailable, "MCP server %s not available when the agent started (waited up to %s): the agent was stopped rather than left to work without it",
		strings.Join(missing, ", "), waited)
}

// writeReadOnly writes a runtime file read-only, replacing a read-only
// one an earlier start left; what names it in errors.
func writeReadOnly(path string, b []byte, what string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_ = os.Remove(path)
	if err := os.WriteFile(path, b, 0o400); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
