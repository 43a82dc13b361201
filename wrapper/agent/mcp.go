package agent

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// How a spec's MCP servers (AGENT_MCP_SERVERS) reach the agent CLIs, as
// found with the pinned versions (wrapper/README.md, "MCP servers"):
//
//   - Claude Code 2.1.197: a config file given with --mcp-config and
//     --strict-mcp-config (no other MCP configuration counts: not the
//     user's, not a .mcp.json in the workspace). By default Claude does
//     not wait for its servers before the first turn (a slow one shows
//     "pending" on the init line); MCP_CONNECTION_NONBLOCKING=0 makes it
//     wait, up to MCP_CONNECT_TIMEOUT_MS, and MCP_TIMEOUT bounds a
//     server's start: both are AGENT_MCP_TIMEOUT. Its init line then
//     gives each server's status; any but "connected" is a server the
//     task would have to do without.
//   - Droid 0.225.2: ~/.factory/mcp.json (what `droid mcp add` writes; a
//     --settings file's mcpServers are ignored), and --add-tools
//     MCP:<server>,... By default Droid starts its servers in the
//     background and its first turn goes without those not yet connected;
//     a tool selector makes it wait until every server has connected or
//     failed, and a server that offers no tool then ends Droid before its
//     init line, exit 1, "Unknown tool identifier(s)" on stderr (it does
//     not say which). Its init line lists the tools it offers, a server's
//     as <server>___<tool>; a server none of whose tools is listed there
//     is missing too.
//
// A server that is not available fails the task with MCP_UNAVAILABLE as
// soon as the agent shows it: Droid before it starts, Claude at its init
// line, which it prints as it sends its first model request (that request
// may be under way when the agent is stopped).

// MCPDocument is the servers in the mcpServers form both CLIs read.
func MCPDocument(servers []protocol.MCPServer) []byte {
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

// mcpUnavailable is the error of servers missing at the agent's start
// (nil when none is).
func mcpUnavailable(missing []string, waited time.Duration) *protocol.Error {
	if len(missing) == 0 {
		return nil
	}
	return protocol.NewError(protocol.CodeMCPUnavailable, "MCP server %s not available when the agent started (waited up to %s): the agent was stopped rather than left to work without it",
		strings.Join(missing, ", "), waited)
}
