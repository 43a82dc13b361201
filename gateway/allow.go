package gateway

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The egress allowlist. Each entry is one of:
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

// allowRule is one parsed entry of an allowlist.
type allowRule struct {
	name     string     // a lower-case name without its trailing dot; for a wildcard, the suffix
	wildcard bool       // any name under name, not name itself
	addr     netip.Addr // an IP literal (valid) instead of a name
	port     uint16     // 0: DefaultPorts
}

// allowlist is a parsed allowlist: a request is allowed when a rule
// matches it. An empty allowlist refuses everything.
type allowlist []allowRule

// ParseAllow checks an allowlist and returns the first bad entry's error,
// which names it.
func ParseAllow(entries []string) error {
	_, err := parseAllow(entries)
	return err
}

func parseAllow(entries []string) (allowlist, error) {
	out := make(allowlist, 0, len(entries))
	for _, e := range entries {
		r, err := parseRule(e)
		if err != nil {
			return nil, fmt.Errorf("gateway: allow entry %q: %w", e, err)
		}
		out = append(out, r)
	}
	return out, nil
}

const allowSyntax = "want host, host:port, *.suffix, *.suffix:port or an IP literal"

func parseRule(e string) (allowRule, error) {
	var r allowRule
	if e == "" {
		return r, fmt.Errorf("empty: %s", allowSyntax)
	}
	host, port, hasPort, err := splitEntry(e)
	if err != nil {
		return r, err
	}
	if hasPort {
		p, err := parsePort(port)
		if err != nil {
			return r, err
		}
		r.port = p
	}
	if host == "*" {
		return r, fmt.Errorf("allows every host: that is host networking, not an allowlist; list the hosts (or *.suffix)")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return r, fmt.Errorf("an IP address with a zone")
		}
		r.addr = a.Unmap()
		return r, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.wildcard = true
		host = rest
	}
	name, ok := normName(host)
	if !ok {
		return r, fmt.Errorf("%q is no host name: %s", host, allowSyntax)
	}
	r.name = name
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
	return "", "", false, fmt.Errorf("too many ':': %s (an IPv6 address with a port is [addr]:port)", allowSyntax)
}

// parsePort reads a port: 1 to 65535, decimal digits only.
func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	return uint16(n), nil
}

// normName returns host lower-cased without its trailing dot, and whether
// it is a host name: dot-separated labels of 1 to 63 letters, digits, '-'
// or '_', not starting or ending with '-', at most 253 bytes, the last
// label not all digits (so that nothing a resolver might read as an IP
// address, as 127.1, passes for a name).
func normName(host string) (string, bool) {
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
	p, err := parsePort(port)
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
	if n, ok := normName(host); ok {
		t.name = n
	}
	return t, nil
}

// allows reports whether the list allows t.
func (l allowlist) allows(t target) bool {
	for _, r := range l {
		if r.matches(t) {
			return true
		}
	}
	return false
}

func (r allowRule) matches(t target) bool {
	if r.port == 0 {
		if t.port != 443 && t.port != 80 {
			return false
		}
	} else if r.port != t.port {
		return false
	}
	if r.addr.IsValid() {
		return t.addr.IsValid() && t.addr == r.addr
	}
	if t.name == "" {
		return false
	}
	if r.wildcard {
		return strings.HasSuffix(t.name, "."+r.name)
	}
	return t.name == r.name
}
