package gateway

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// The egress allowlist: protocol.EgressRule's syntax, parsed by the
// protocol (the manager checks a spec's list with the same parser).

// allowlist is a parsed allowlist: a request is allowed when a rule
// matches it. An empty allowlist refuses everything.
type allowlist []protocol.EgressRule

// ParseAllow checks an allowlist and returns the first bad entry's error,
// which names it.
func ParseAllow(entries []string) error {
	_, err := parseAllow(entries)
	return err
}

func parseAllow(entries []string) (allowlist, error) {
	rules, err := protocol.ParseEgressRules(entries)
	if err != nil {
		return nil, fmt.Errorf("gateway: allow %w", err)
	}
	return rules, nil
}

// target is the destination of one egress request, as the container named
// it: a name (normalised) or an IP literal, and a port.
type target struct {
	name string     // "" for an IP literal
	addr netip.Addr // valid for an IP literal
	port uint16
	raw  string // the host as the request wrote it, for messages
}

func (t target) host() string {
	if t.name != "" {
		return t.name
	}
	if t.addr.IsValid() {
		return t.addr.String()
	}
	return t.raw
}

// String is host:port, as the X-Agentvisor-Refused header carries it.
func (t target) String() string {
	return joinHostPort(t.host(), t.port)
}

func joinHostPort(host string, port uint16) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

// parseTarget reads host (as net.SplitHostPort gives it, brackets gone)
// and port. A host that is neither an IP literal nor a host name is kept
// raw: no rule matches it.
func parseTarget(host, port string) (target, error) {
	p, err := protocol.ParsePort(port)
	if err != nil {
		return target{}, err
	}
	t := target{port: p, raw: host}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() == "" {
			t.addr = a.Unmap()
		}
		return t, nil
	}
	if n, ok := protocol.NormalizeHostName(host); ok {
		t.name = n
	}
	return t, nil
}

// allows reports whether the list allows t.
func (l allowlist) allows(t target) bool {
	for _, r := range l {
		if r.Matches(t.name, t.addr, t.port) {
			return true
		}
	}
	return false
}
