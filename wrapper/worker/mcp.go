package worker

// MCP servers (AGENT_MCP_SERVERS): how each CLI is given them, and how
// the wrapper checks they are there, is its adapter's (package agent).
// The wrapper reads them, and treats their settings as secrets.

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
