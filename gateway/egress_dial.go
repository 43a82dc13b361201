package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"
)

// How the egress proxy reaches what it allowed: a name resolved by the
// gateway, the local addresses it resolves to left out; each address
// dialled in turn; a CONNECT tunnel relayed both ways.

// localError is a name resolved to addresses the egress proxy does not
// dial for a name.
type localError struct {
	name  string
	addrs []netip.Addr
}

func (e *localError) Error() string {
	// The addresses are logged, not said: they would tell the container
	// what the host's resolver knows of the inside of its network.
	return "resolves to local addresses only: loopback, private, link-local, unspecified or multicast addresses are not dialled for a name (list the IP literal to reach it)"

}

// local reports whether a is an address no name may lead to.
func local(a netip.Addr) bool {
	if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsPrivate() {
		return true
	}
	for _, p := range notForNames {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// notForNames are the ranges besides the private ones (10/8, 172.16/12,
// 192.168/16, fc00::/7) that a name may not lead to: "this network",
// carrier-grade NAT (where some clouds keep their metadata service),
// IPv6 site-local, and the IPv4-in-IPv6 translations of any address.
var notForNames = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fec0::/10"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("2002::/16"),
}

// resolve returns the addresses to dial for t: an IP literal's own, or
// what the resolver says of a name, local addresses left out.
func (p *egressPolicy) resolve(ctx context.Context, t target) ([]netip.Addr, error) {
	if t.addr.IsValid() {
		return []netip.Addr{t.addr}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	hosts, err := p.resolver(ctx, t.name)
	if err != nil {
		return nil, err
	}
	var addrs, dropped []netip.Addr
	for _, h := range hosts {
		a, err := netip.ParseAddr(h)
		if err != nil {
			continue
		}
		a = a.Unmap()
		if local(a) {
			dropped = append(dropped, a)
			continue
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		if len(dropped) > 0 {
			return nil, &localError{t.name, dropped}
		}
		return nil, fmt.Errorf("%s: no address", t.name)
	}
	return addrs, nil
}

// dial dials port on each of addrs in turn until one answers.
func (p *egressPolicy) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, error) {
	var first error
	for _, a := range addrs {
		dctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
		c, err := p.dialer(dctx, "tcp", netip.AddrPortFrom(a, port).String())
		cancel()
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// addrsKey carries a plain HTTP request's resolved addresses to the
// transport's dial.
type addrsKey struct{}

type resolved struct {
	hostPort string
	addrs    []netip.Addr
	req      context.Context // the request's: its end ends the dial
}

// transportDial dials addr for the plain HTTP transport: the addresses
// the request was resolved to, or (a dial for another request of the same
// host:port) resolved again with the same checks.
func (e *egress) transportDial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	t, err := parseTarget(host, port)
	if err != nil {
		return nil, err
	}
	if rs, ok := ctx.Value(addrsKey{}).(resolved); ok && rs.hostPort == t.String() {
		// The transport dials on after its request is gone; a container
		// that drops its requests must not leave dials behind.
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(rs.req, cancel)
		defer stop()
		return e.policy.dial(dctx, rs.addrs, t.port)
	}
	if !e.allows(t) {
		return nil, fmt.Errorf("%s is not on the worker's egress allowlist", addr)
	}
	addrs, err := e.policy.resolve(ctx, t)
	if err != nil {
		return nil, err
	}
	return e.policy.dial(ctx, addrs, t.port)
}

// connect dials t and relays bytes both ways between it and the
// container's connection, once answered 200.
func (e *egress) connect(ctx context.Context, rw http.ResponseWriter, t target, addrs []netip.Addr) {
	up, err := e.policy.dial(ctx, addrs, t.port)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		e.side.stats.dialErrors.Add(1)
		e.side.log.Warn("egress dial", "host", t.host(), "port", t.port, "err", err)
		// The error names the addresses dialled: logged, not said.
		http.Error(rw, fmt.Sprintf("agentvisor gateway: %s: the host does not answer", printable(t.String())), http.StatusBadGateway)
		return
	}
	if !e.side.conns.take(up, upstreamConn) {
		return // the worker closed: up closed
	}
	defer func() {
		up.Close()
		e.side.conns.drop(up, upstreamConn)
	}()
	hj, ok := rw.(http.Hijacker)
	if !ok {
		http.Error(rw, "agentvisor gateway: no hijack", http.StatusInternalServerError)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// What the container sent after the CONNECT at once (a TLS
	// ClientHello) is in the server's buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	// c counts the bytes itself (trackedConn).
	var uncounted atomic.Int64
	relayBoth(c, up, &uncounted, &uncounted, e.side.log, "egress relay panicked")
}
