package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
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

// mcpConfigPath is Claude's --mcp-config file.
func (c *Config) mcpConfigPath() string {
	return filepath.Join(os.TempDir(), "agentvisor-"+c.WorkerID, "mcp.json")
}

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

// writeMCPConfig writes the agent's MCP configuration when the spec names
// servers: Claude's --mcp-config file, or Droid's ~/.factory/mcp.json
// (replacing whatever an earlier worker on the same HOME left there).
// Without servers it writes nothing: outside a container HOME is a
// person's, whose own Droid servers are not ours to remove.
func (c *Config) writeMCPConfig(home string) error {
	switch {
	case len(c.MCPServers) == 0:
	case c.AgentType == protocol.AgentDroid && home == "":
		return fmt.Errorf("mcp servers: HOME is not set, so Droid's ~/.factory/mcp.json cannot be written")
	case c.AgentType == protocol.AgentDroid:
		dir := filepath.Join(home, ".factory")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("mcp servers: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "mcp.json"), mcpDocument(c.MCPServers), 0o600); err != nil {
			return fmt.Errorf("mcp servers: %w", err)
		}
	default:
		p := c.mcpConfigPath()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("mcp servers: %w", err)
		}
		_ = os.Remove(p) // read-only from an earlier start
		if err := os.WriteFile(p, mcpDocument(c.MCPServers), 0o400); err != nil {
			return fmt.Errorf("mcp servers: %w", err)
		}
	}
	return nil
}

// mcpArgs are the agent's MCP flags.
func (c *Config) mcpArgs() []string {
	if len(c.MCPServers) == 0 {
		return nil
	}
	if c.AgentType == protocol.AgentDroid {
		sel := make([]string, len(c.MCPServers))
		for i, s := range c.MCPServers {
			sel[i] = "MCP:" + s.Name
		}
		return []string{"--add-tools", strings.Join(sel, ",")}
	}
	return []string{"--mcp-config", c.mcpConfigPath(), "--strict-mcp-config"}
}

// droidMCPRefusal is what Droid prints when a server named in --add-tools
// offers no tool (it did not start or connect).
const droidMCPRefusal = "Unknown tool identifier"

// mcpOutcome turns Droid's refusal to start without a server of the spec
// (no init line, no result, droidMCPRefusal on stderr) into an abort with
// MCP_UNAVAILABLE; any other outcome is returned as it is.
func (c *Config) mcpOutcome(o agent.Outcome) agent.Outcome {
	if c.AgentType != protocol.AgentDroid || len(c.MCPServers) == 0 || o.Aborted != nil || o.Init != nil ||
		o.Result != nil || o.StartErr != nil || !strings.Contains(o.Stderr, droidMCPRefusal) {
		return o
	}
	names := make([]string, len(c.MCPServers))
	for i, s := range c.MCPServers {
		names[i] = s.Name
	}
	o.Aborted = protocol.NewError(protocol.CodeMCPUnavailable, "MCP server not available: Droid would not start, as one of %s offered no tool (it did not start or connect): %s",
		strings.Join(names, ", "), strings.TrimSpace(o.Stderr))
	return o
}

// mcpEnv makes Claude wait for its MCP servers before the first turn, at
// most MCPTimeout, so that its init line says whether each connected.
func (c *Config) mcpEnv() []string {
	if c.AgentType != protocol.AgentClaude || len(c.MCPServers) == 0 {
		return nil
	}
	ms := strconv.FormatInt(c.MCPTimeout.Milliseconds(), 10)
	return []string{"MCP_CONNECTION_NONBLOCKING=0", "MCP_CONNECT_TIMEOUT_MS=" + ms, "MCP_TIMEOUT=" + ms}
}

// mcpAllowedTools are Claude permission rules that allow every tool of
// the spec's servers: a list in ALLOWED_COMMANDS runs Claude in dontAsk
// mode, where a tool no rule allows is denied. The spec's author chose
// the servers; ALLOWED_COMMANDS governs shell commands.
func (c *Config) mcpAllowedTools() []string {
	var rules []string
	for _, s := range c.MCPServers {
		rules = append(rules, "mcp__"+s.Name)
	}
	return rules
}

// checkMCP is the runner's check (agent.Spec.Check) of the agent's init
// line: every server of the spec must be there. It returns
// MCP_UNAVAILABLE, naming each missing server and why, otherwise nil.
func (c *Config) checkMCP(ev agent.Event) *protocol.Error {
	if ev.Init == nil || len(c.MCPServers) == 0 {
		return nil
	}
	var missing []string
	switch c.AgentType {
	case protocol.AgentDroid:
		for _, s := range c.MCPServers {
			found := false
			for _, t := range ev.Init.Tools {
				if strings.HasPrefix(t, s.Name+"___") {
					found = true
					break
				}
			}
			if !found {
				missing = append(missing, s.Name+" (none of its tools offered at start)")
			}
		}
	default:
		status := map[string]string{}
		for _, m := range ev.Init.MCPServers {
			status[m.Name] = m.Status
		}
		for _, s := range c.MCPServers {
			switch st, ok := status[s.Name]; {
			case !ok:
				missing = append(missing, s.Name+" (not reported)")
			case st != "connected":
				missing = append(missing, s.Name+" ("+st+")")
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return protocol.NewError(protocol.CodeMCPUnavailable, "MCP server %s not available when the agent started (waited up to %s): the agent was stopped rather than left to work without it",
		strings.Join(missing, ", "), c.MCPTimeout)
}

// mcpSecrets are the MCP servers' settings that the redactor treats as
// the wrapper's own variables: each env entry under its name (redacted
// when the name says KEY, TOKEN, SECRET or PASSWORD, as the spec's env
// is), and every header value, which is most often a credential.
func (c *Config) mcpSecrets() []string {
	var kv []string
	for _, s := range c.MCPServers {
		for k, v := range s.Env {
			kv = append(kv, k+"="+v)
		}
		for _, v := range s.Headers {
			kv = append(kv, "MCP_HEADER_TOKEN="+v)
		}
	}
	return kv
}
