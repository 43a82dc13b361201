package protocol

import (
	"net/netip"
	"testing"
)

func TestEgressRules(t *testing.T) {
	for _, c := range []struct {
		rule, host string
		port       int
		want       bool
	}{
		{"github.com", "github.com", 443, true},
		{"github.com", "GitHub.com.", 80, true},
		{"github.com", "github.com", 22, false},
		{"github.com", "api.github.com", 443, false},
		{"github.com:8443", "github.com", 8443, true},
		{"github.com:8443", "github.com", 443, false},
		{"*.github.com", "api.github.com", 443, true},
		{"*.github.com", "a.b.github.com", 443, true},
		{"*.github.com", "github.com", 443, false},
		{"*.github.com", "evilgithub.com", 443, false},
		{"*.github.com:22", "ssh.github.com", 22, true},
		{"127.0.0.1:8443", "127.0.0.1", 8443, true},
		{"127.0.0.1:8443", "localhost", 8443, false},
		{"localhost:8443", "127.0.0.1", 8443, false},
		{"10.0.0.1", "10.0.0.1", 443, true},
		{"[::1]:9000", "::1", 9000, true},
	} {
		r, err := ParseEgressRule(c.rule)
		if err != nil {
			t.Fatalf("%q: %v", c.rule, err)
		}
		if got := egressAllowed([]EgressRule{r}, c.host, c.port); got != c.want {
			t.Errorf("%q allows %s:%d = %v, want %v", c.rule, c.host, c.port, got, c.want)
		}
	}
	for _, bad := range []string{"*", "*:443", "", "github.com:0", "github.com:70000", "github.com:x", "exa mple.com", "-a.com", "a..com", "*.", "http://github.com", "127.1", "[fe80::1%eth0]", "github.com:"} {
		if _, err := ParseEgressRule(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := ParseEgressRules(make([]string, MaxEgressRules+1)); err == nil {
		t.Error("an allowlist over the bound parsed")
	}
	rules, _ := ParseEgressRules(nil)
	if egressAllowed(rules, "github.com", 443) {
		t.Error("an empty allowlist let something through")
	}
	spec := WorkerSpec{AgentType: AgentClaude, Network: &Network{Allow: []string{"github.com", "*"}}}
	if err := spec.Validate(); err == nil {
		t.Error("a spec allowing * validated")
	}
}

// egressAllowed reports whether any rule lets host:port through (host: a
// name or an IP literal, as a request names it), as the gateway matches.
func egressAllowed(rules []EgressRule, host string, port int) bool {
	if port < 1 || port > 65535 {
		return false
	}
	name, addr := "", netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addr = a.Unmap()
	} else if n, ok := NormalizeHostName(host); ok {
		name = n
	}
	for _, r := range rules {
		if r.Matches(name, addr, uint16(port)) {
			return true
		}
	}
	return false
}
