package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// fakeSentinel answers SENTINEL MASTER with the primary it is told to
// name, after a delay; SUBSCRIBE is confirmed and held.
type fakeSentinel struct {
	addr    string
	primary atomic.Pointer[string] // "host:port"
	epoch   atomic.Int64
	delay   atomic.Int64 // nanoseconds before each answer
	asked   atomic.Int64
	failing atomic.Bool // its flags say failover_in_progress
}

func startFakeSentinel(t *testing.T, primary string, epoch int64) *fakeSentinel {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f := &fakeSentinel{addr: l.Addr().String()}
	f.primary.Store(&primary)
	f.epoch.Store(epoch)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeSentinel) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		words, err := readCommand(r)
		if err != nil {
			return
		}
		switch strings.ToUpper(words[0]) {
		case "SUBSCRIBE":
			for _, ch := range words[1:] {
				fmt.Fprintf(c, "*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n", len(ch), ch)
			}
		case "SENTINEL":
			f.asked.Add(1)
			time.Sleep(time.Duration(f.delay.Load()))
			host, port, _ := net.SplitHostPort(*f.primary.Load())
			flags := "master"
			if f.failing.Load() {
				flags += ",failover_in_progress"
			}
			fields := []string{"name", "m", "ip", host, "port", port, "flags", flags, "config-epoch", fmt.Sprint(f.epoch.Load())}
			if len(words) > 1 && strings.EqualFold(words[1], "GET-MASTER-ADDR-BY-NAME") {
				fields = []string{host, port}
			}
			fmt.Fprintf(c, "*%d\r\n", len(fields))
			for _, w := range fields {
				fmt.Fprintf(c, "$%d\r\n%s\r\n", len(w), w)
			}
		default:
			fmt.Fprint(c, "+OK\r\n")
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	var n int
	if _, err := fmt.Sscanf(line, "*%d\r\n", &n); err != nil || n < 1 {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	words := make([]string, n)
	for i := range words {
		var size int
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		if _, err := fmt.Sscanf(line, "$%d\r\n", &size); err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		words[i] = string(b[:size])
	}
	return words, nil
}

func fakeSentinels(t *testing.T, fs ...*fakeSentinel) *sentinels {
	t.Helper()
	u := protocol.RedisURL{Sentinel: true, Master: "m"}
	for _, f := range fs {
		u.Addrs = append(u.Addrs, f.addr)
	}
	return newSentinels(t.Context(), sentinelParams{url: u, timeout: 2 * time.Second, log: slog.New(slog.DiscardHandler)})
}

// A lookup under way when a failover is fenced does not hand its answer
// (the old primary) to the connections waiting for it: they wait for the
// fence, and get the primary the switch names.
func TestFenceHoldsALookupUnderWay(t *testing.T) {
	f := startFakeSentinel(t, "10.0.0.1:6379", 0)
	f.delay.Store(int64(300 * time.Millisecond))
	s := fakeSentinels(t, f)
	type got struct {
		addr string
		err  error
	}
	done := make(chan got, 1)
	go func() {
		addr, _, err := s.primary(context.Background())
		done <- got{addr, err}
	}()
	time.Sleep(100 * time.Millisecond) // the lookup is under way
	s.fenceFrom(f.addr)
	select {
	case g := <-done:
		t.Fatalf("a connection got %q (%v) while the failover was fenced", g.addr, g.err)
	case <-time.After(500 * time.Millisecond):
	}
	s.switchTo("10.0.0.2:6379")
	select {
	case g := <-done:
		if g.err != nil || g.addr != "10.0.0.2:6379" {
			t.Fatalf("after the switch: %q %v, want the new primary", g.addr, g.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still held after the switch")
	}
}

// The primary a +switch-master announces serves the connections the
// fence held, although most sentinels still name the old one; a lookup
// takes the newest configuration epoch over the majority.
func TestSwitchKeepsTheAnnouncedPrimary(t *testing.T) {
	leader := startFakeSentinel(t, "10.0.0.2:6379", 1)
	a := startFakeSentinel(t, "10.0.0.1:6379", 0)
	b := startFakeSentinel(t, "10.0.0.1:6379", 0)
	a.delay.Store(int64(100 * time.Millisecond)) // the leader answers first
	b.delay.Store(int64(200 * time.Millisecond))
	s := fakeSentinels(t, leader, a, b)
	s.fenceFrom(leader.addr)
	s.switchTo("10.0.0.2:6379")
	asked := leader.asked.Load() + a.asked.Load() + b.asked.Load()
	if addr, _, err := s.primary(context.Background()); err != nil || addr != "10.0.0.2:6379" {
		t.Fatalf("after the switch: %q %v, want the announced primary", addr, err)
	}
	if n := leader.asked.Load() + a.asked.Load() + b.asked.Load(); n != asked {
		t.Errorf("the sentinels were asked %d times after the switch: the announced primary is not cached", n-asked)
	}
	s.forgetAll() // as after a cache's expiry
	if addr, _, err := s.primary(context.Background()); err != nil || addr != "10.0.0.2:6379" {
		t.Fatalf("a lookup: %q %v, want the primary of the newest epoch", addr, err)
	}
}

// While a sentinel says it is failing the master over, a lookup names no
// primary (the old one still answers, and drops what it takes), however
// many sentinels still name it.
func TestLookupNamesNoPrimaryMidFailover(t *testing.T) {
	leader := startFakeSentinel(t, "10.0.0.1:6379", 0)
	leader.failing.Store(true)
	a := startFakeSentinel(t, "10.0.0.1:6379", 0)
	b := startFakeSentinel(t, "10.0.0.1:6379", 0)
	s := fakeSentinels(t, a, b, leader)
	a.delay.Store(int64(100 * time.Millisecond)) // the failing leader answers first
	b.delay.Store(int64(100 * time.Millisecond))
	if addr, err := s.client.ask(context.Background()); err == nil {
		t.Fatalf("a lookup named %q while a sentinel was failing the master over", addr)
	}
}
