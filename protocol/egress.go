package protocol

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// MaxEgressRules bounds a worker's egress allowlist.
const MaxEgressRules = 64

// Network is what a sealed worker may reach beyond Redis and the model
// API: its egress allowlist, over the operator's defaults. Empty: nothing
// (a sealed worker fails closed).
type Network struct {
	// Allow lists the hosts (and ports) the agent may reach through the
	// gateway's proxy (EgressRule's syntax).
	Allow []string `json:"allow,omitempty"`
}

// EgressRule is one entry of an egress allowlist:
//
//	host             the host itself, ports 443 and 80
//	host:port        the host itself, that port
//	*.suffix         any name under suffix (not suffix itself), ports 443 and 80
//	*.suffix:port    the same, that port
//	203.0.113.7:8443 an IP address (with or without a port) matches only a
//	                 request for that address: a name never matches an
//	                 address nor an address a name
//
// "*" alone is refused: an allowlist that allows everything is host
// networking. Names compare without regard to case, a trailing dot
// dropped.
type EgressRule struct {
	Host     string // a name in lower case, or an IP address
	Wildcard bool   // Host is a suffix: any name under it
	IP       bool   // Host is an IP address
	Port     int    // 0: 443 and 80
}

// ParseEgressRule parses one allowlist entry.
func ParseEgressRule(s string) (EgressRule, error) {
	if s == "*" || strings.HasPrefix(s, "*:") {
		return EgressRule{}, fmt.Errorf("%q allows every host: that is host networking, not an allowlist", s)
	}
	host, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return EgressRule{}, fmt.Errorf("%q: the port is not 1 to 65535", s)
		}
		host, port = h, n
	}
	r := EgressRule{Port: port}
	if a, err := netip.ParseAddr(host); err == nil {
		r.Host, r.IP = a.String(), true
		return r, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, r.Wildcard = rest, true
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if !validHostName(host) {
		return EgressRule{}, fmt.Errorf("%q is not a host name, *.suffix or an IP address (with an optional :port)", s)
	}
	r.Host = host
	return r, nil
}

// ParseEgressRules parses an allowlist.
func ParseEgressRules(list []string) ([]EgressRule, error) {
	if len(list) > MaxEgressRules {
		return nil, fmt.Errorf("%d entries, at most %d", len(list), MaxEgressRules)
	}
	out := make([]EgressRule, 0, len(list))
	for i, s := range list {
		r, err := ParseEgressRule(s)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Allows reports whether r lets a request for host:port through.
func (r EgressRule) Allows(host string, port int) bool {
	if r.Port == 0 && port != 443 && port != 80 || r.Port != 0 && port != r.Port {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return r.IP && a.String() == r.Host
	}
	if r.IP {
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if r.Wildcard {
		return strings.HasSuffix(host, "."+r.Host)
	}
	return host == r.Host
}

// EgressAllowed reports whether any rule lets host:port through.
func EgressAllowed(rules []EgressRule, host string, port int) bool {
	for _, r := range rules {
		if r.Allows(host, port) {
			return true
		}
	}
	return false
}

// validHostName: labels of letters, digits and hyphens, 1 to 63 bytes,
// not starting or ending with a hyphen; 253 bytes at most.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
