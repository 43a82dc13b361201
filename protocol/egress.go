package protocol

import (
	"fmt"
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

// EgressRule is one parsed entry of an egress allowlist. Each entry is
// one of:
//
//	host              the name exactly, on ports 443 and 80
//	host:port         the name exactly, on that port
//	*.suffix          any name under suffix (not suffix itself), on 443 and 80
//	*.suffix:port     the same, on that port
//	1.2.3.4[:port]    an IP literal ([::1] or [::1]:port for IPv6)
//
// Names compare case-insensitively, a trailing dot stripped. A name on the
// list never matches a request for an IP literal, nor an IP literal a
// request for a name. "*" (or "*:port") is refused: a list that allows
// every host is host networking, not an allowlist.
type EgressRule struct {
	Name     string     // a lower-case name without its trailing dot; for a wildcard, the suffix
	Wildcard bool       // any name under Name, not Name itself
	Addr     netip.Addr // an IP literal (valid) instead of a name
	Port     uint16     // 0: 443 and 80
}

const egressSyntax = "want host, host:port, *.suffix, *.suffix:port or an IP literal"

// ParseEgressRules parses an allowlist; an error names the bad entry.
func ParseEgressRules(list []string) ([]EgressRule, error) {
	if len(list) > MaxEgressRules {
		return nil, fmt.Errorf("%d entries, at most %d", len(list), MaxEgressRules)
	}
	out := make([]EgressRule, 0, len(list))
	for _, e := range list {
		r, err := ParseEgressRule(e)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", e, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseEgressRule parses one allowlist entry.
func ParseEgressRule(e string) (EgressRule, error) {
	var r EgressRule
	if e == "" {
		return r, fmt.Errorf("empty: %s", egressSyntax)
	}
	host, port, hasPort, err := splitEntry(e)
	if err != nil {
		return r, err
	}
	if hasPort {
		p, err := ParsePort(port)
		if err != nil {
			return r, err
		}
		r.Port = p
	}
	if host == "*" {
		return r, fmt.Errorf("allows every host: that is host networking, not an allowlist; list the hosts (or *.suffix)")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return r, fmt.Errorf("an IP address with a zone")
		}
		r.Addr = a.Unmap()
		return r, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard = true
		host = rest
	}
	name, ok := NormalizeHostName(host)
	if !ok {
		return r, fmt.Errorf("%q is no host name: %s", host, egressSyntax)
	}
	r.Name = name
	return r, nil
}

// splitEntry splits an entry into its host and port, if it has one.
func splitEntry(e string) (host, port string, hasPort bool, err error) {
	if strings.HasPrefix(e, "[") {
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return "", "", false, fmt.Errorf("no closing ']'")
		}
		host, rest := e[1:end], e[end+1:]
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return "", "", false, fmt.Errorf("%q in brackets is no IPv6 address", host)
		}
		if rest == "" {
			return host, "", false, nil
		}
		if port, ok := strings.CutPrefix(rest, ":"); ok {
			return host, port, true, nil
		}
		return "", "", false, fmt.Errorf("%q after the address: want :port", rest)
	}
	switch strings.Count(e, ":") {
	case 0:
		return e, "", false, nil
	case 1:
		host, port, _ := strings.Cut(e, ":")
		return host, port, true, nil
	}
	// A bare IPv6 address, without a port.
	if a, err := netip.ParseAddr(e); err == nil && a.Is6() {
		return e, "", false, nil
	}
	return "", "", false, fmt.Errorf("too many ':': %s (an IPv6 address with a port is [addr]:port)", egressSyntax)
}

// ParsePort reads a port: 1 to 65535, decimal digits only.
func ParsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	return uint16(n), nil
}

// NormalizeHostName returns host lower-cased without its trailing dot, and whether
// it is a host name: dot-separated labels of 1 to 63 letters, digits, '-'
// or '_', not starting or ending with '-', at most 253 bytes, the last
// label not all digits (so that nothing a resolver might read as an IP
// address, as 127.1, passes for a name).
func NormalizeHostName(host string) (string, bool) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" || len(host) > 253 {
		return "", false
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	if strings.TrimLeft(labels[len(labels)-1], "0123456789") == "" {
		return "", false
	}
	return host, true
}

// Matches reports whether r lets a request through for port and either a
// name (normalised, as NormalizeHostName gives it) or an IP literal (addr
// valid).
func (r EgressRule) Matches(name string, addr netip.Addr, port uint16) bool {
	if r.Port == 0 {
		if port != 443 && port != 80 {
			return false
		}
	} else if r.Port != port {
		return false
	}
	if r.Addr.IsValid() {
		return addr.IsValid() && addr == r.Addr
	}
	if name == "" {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(name, "."+r.Name)
	}
	return name == r.Name
}
