package testkit

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// rawClient speaks RESP to addr, one command at a time.
type rawClient struct {
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{c: c, r: bufio.NewReader(c)}
}

// do sends args as a RESP array and returns the reply's bytes.
func (rc *rawClient) do(args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = rc.c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	v, err := readValue(rc.r)
	return string(v.raw), err
}

func TestProxyForwardsRESP3(t *testing.T) {
	r := StartRedis(t)
	p := StartProxy(t, r.Addr)
	c := dialRaw(t, p.Addr)
	// HELLO 3 answers with a map: the proxy must frame it whole.
	if got, err := c.do("HELLO", "3"); err != nil || !strings.HasPrefix(got, "%") {
		t.Fatalf("HELLO 3 = %q, %v", got, err)
	}
	if got, err := c.do("SET", "k", "v"); err != nil || got != "+OK\r\n" {
		t.Fatalf("SET = %q, %v", got, err)
	}
	if got, err := c.do("GET", "missing"); err != nil || got != "_\r\n" {
		t.Fatalf("GET missing = %q, %v", got, err)
	}
	if got, err := c.do("NOSUCHCOMMAND"); err != nil || !strings.HasPrefix(got, "-ERR") {
		t.Fatalf("unknown command = %q, %v", got, err)
	}
}

func TestProxyDropsADeliveredReply(t *testing.T) {
	r := StartRedis(t)
	p := StartProxy(t, r.Addr)
	for _, cmd := range [][]string{{"XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"}, {"XADD", "s", "*", "data", "x"}} {
		if _, err := r.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	var seen []Reply
	p.SetCut(func(rep Reply) Cut {
		seen = append(seen, rep)
		if rep.Name() == "XREADGROUP" && !rep.Null {
			return DropReply
		}
		return Forward
	})
	c := dialRaw(t, p.Addr)
	if got, err := c.do("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">"); err == nil {
		t.Fatalf("the reply reached the client: %q", got)
	}
	if p.Cuts() != 1 || len(seen) != 1 || strings.Join(seen[0].Command, " ") != "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >" {
		t.Fatalf("cuts %d, replies seen %+v", p.Cuts(), seen)
	}
	// Redis delivered the entry all the same: it is pending for c1.
	if got, err := r.Do("XPENDING", "s", "g"); err != nil || got != "*4" {
		t.Fatalf("XPENDING = %q, %v", got, err)
	}
	c2 := dialRaw(t, p.Addr)
	if got, _ := c2.do("XPENDING", "s", "g", "-", "+", "10", "c1"); !strings.HasPrefix(got, "*1\r\n") {
		t.Fatalf("c1's pending entries: %q, want one", got)
	}
}

func TestProxyCutsAfterAReply(t *testing.T) {
	r := StartRedis(t)
	p := StartProxy(t, r.Addr)
	p.SetCut(func(rep Reply) Cut {
		if rep.Name() == "PING" {
			return CutAfterReply
		}
		return Forward
	})
	c := dialRaw(t, p.Addr)
	if got, err := c.do("PING"); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	if _, err := c.do("ECHO", "x"); err == nil {
		t.Fatal("the connection survived the cut")
	}
}
