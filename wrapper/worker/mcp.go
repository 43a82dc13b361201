package worker

// How a spec's MCP servers reach the agent and how their start is checked
// is the agent's adapter's (agent/mcp.go). The wrapper keeps their
// secrets out of what it publishes.

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
