package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/testkit"
)

// gatewaySentinelURL is the deployment's sentinel URL as the gateway
// takes it: the sentinels, the master's name, the sentinels' password,
// never the servers' one.
func gatewaySentinelURL(s *testkit.Sentinel) string {
	var addrs []string
	for _, sn := range s.Sentinels {
		addrs = append(addrs, sn.Addr)
	}
	u := "redis+sentinel://" + strings.Join(addrs, ",") + "/" + s.Master
	if s.SentinelPassword != "" {
		u += "?sentinel_password=" + s.SentinelPassword
	}
	return u
}

// startSentinelGateway serves worker "w" of a gateway following s's
// primary and returns its redis.sock.
func startSentinelGateway(t *testing.T, s *testkit.Sentinel) (*Gateway, string) {
	t.Helper()
	dir := shortDir(t)
	g, c := startGatewayWith(t, Config{Dir: dir, Redis: gatewaySentinelURL(s)})
	if err := c.Open(context.Background(), "w", nil); err != nil {
		t.Fatal(err)
	}
	return g, sockOf(dir, "w", RedisSocket)
}

// wrapperClient is the client a sealed worker's wrapper makes: the plain
// URL the manager gives it (the master's name as host, the data user's
// credentials) through redis.sock.
func wrapperClient(t *testing.T, s *testkit.Sentinel, sock string) *redis.Client {
	t.Helper()
	o, err := redisconn.Options("redis://:" + s.Password + "@" + s.Master + ":6379/0")
	if err != nil {
		t.Fatal(err)
	}
	if err := redisconn.ThroughSocket(o, sock); err != nil {
		t.Fatal(err)
	}
	// The wrapper's settings (wrapper/internal/rdb): no retry of go-redis's
	// own, short timeouts.
	o.MaxRetries, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.ContextTimeoutEnabled = -1, 2*time.Second, 3*time.Second, 3*time.Second, true
	c := redisconn.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// dialAuthed is dialRaw, then AUTH password.
func dialAuthed(t *testing.T, sock, password string) *rawConn {
	t.Helper()
	c := dialRaw(t, sock)
	if _, err := io.WriteString(c, "AUTH "+password+"\r\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := c.r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("AUTH: %q %v", line, err)
	}
	return c
}

// A gateway given a sentinel URL relays a worker's redis.sock to the
// primary the sentinels name: PING and XADD reach it.
func TestSentinelRelaysToPrimary(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "pw", SentinelPassword: "spw"})
	_, sock := startSentinelGateway(t, s)
	c := wrapperClient(t, s, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the socket: %v", err)
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"data", "{}"}}).Err(); err != nil {
		t.Fatal(err)
	}
	p, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.DoArray("XLEN", "s"); err != nil || len(n) != 1 || n[0] != "1" {
		t.Fatalf("the primary %s has %q entries (%v), want 1", p.Addr, n, err)
	}
	if p != s.Servers[0] {
		t.Fatalf("the sentinels name %s, not the first primary", p.Addr)
	}
}

// The wrapper's writes (redisconn.XAdd with WAIT) go on across a
// failover through the same socket: the gateway closes the connections to
// the old primary, the client reconnects and reaches the new one, and
// every entry confirmed is on it, none lost.
func TestSentinelFailoverThroughSocket(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "pw", SentinelPassword: "spw"})
	_, sock := startSentinelGateway(t, s)
	c := wrapperClient(t, s, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := protocol.WaitPolicy{Replicas: 1, Timeout: protocol.DefaultRedisWaitTimeout}
	var ids []string
	short, failed := 0, 0
	add := func() error {
		id, err := redisconn.XAdd(ctx, c, p, &redis.XAddArgs{Stream: "s", Values: []any{"data", "{}"}})
		if redisconn.IsNotReplicated(err) {
			short, err = short+1, nil // on the new primary before its replica is back
		}
		if err != nil && id == "" && ctx.Err() == nil {
			// The add itself failed, its connection cut: the caller's to
			// send again (the wrapper does, with backoff). Whether the
			// server had made it before the cut nobody can know: the
			// stream may hold it as well as the add sent again.
			failed++
			time.Sleep(50 * time.Millisecond)
			return nil
		}
		if err == nil {
			ids = append(ids, id)
		}
		return err
	}
	if err := add(); err != nil {
		t.Fatal(err)
	}
	held := dialAuthed(t, sock, s.Password) // a connection open across the failover
	if err := held.ping(); err != nil {
		t.Fatal(err)
	}
	old, _ := s.Primary()
	if err := s.Failover(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil && len(ids) < 200 {
			if err := add(); err != nil {
				done <- err
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		done <- nil
	}()
	nw, err := s.WaitNewPrimary(old, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("XAdd: %v", err)
	}
	if err := held.ping(); err == nil {
		t.Fatal("a connection to the old primary still answers after the failover")
	}
	n, err := c.XLen(ctx, "s").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := "?"
	if a, err := nw.DoArray("XLEN", "s"); err == nil && len(a) == 1 {
		got = a[0]
	}
	t.Logf("%d entries added across the failover (%d not acknowledged by a replica, %d adds cut and sent again), the new primary %s has %s", len(ids), short, failed, nw.Addr, got)
	// Every confirmed add is there, through the socket and on the new
	// primary alike; beyond them, at most the adds whose connection was
	// cut (made, or not, before the cut).
	onNew, _ := strconv.ParseInt(got, 10, 64)
	if n < int64(len(ids)) || n > int64(len(ids)+failed) || onNew != n {
		t.Fatalf("the stream has %d entries through the socket, %s on the new primary; %d were confirmed, %d cut", n, got, len(ids), failed)
	}
	if role, _ := c.Do(ctx, "ROLE").Slice(); len(role) == 0 || role[0] != "master" {
		t.Fatalf("the socket reaches a server of role %v after the failover, want master", role)
	}
}

// Between the promotion of a replica and the sentinels' +switch-master
// (about a second here), the old primary still takes writes, and drops
// them when it is demoted. The gateway holds a worker's connections from
// the moment the sentinels start choosing the replica until they name the
// new primary, so that no write through the socket reaches the old one:
// every XADD that returned an id, sent without WAIT every few
// milliseconds across the failover, is on the new primary.
func TestSentinelFailoverLosesNoWriteThroughTheSocket(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "pw", SentinelPassword: "spw"})
	_, sock := startSentinelGateway(t, s)
	c := wrapperClient(t, s, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	type result struct {
		acked  []string
		failed int
	}
	done := make(chan result, 1)
	go func() {
		var r result
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- r
				return
			default:
			}
			id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []any{"n", i}}).Result()
			if err != nil {
				r.failed++ // not taken, or not known to be: the caller's to send again
			} else {
				r.acked = append(r.acked, id)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := s.Failover(); err != nil {
		t.Fatal(err)
	}
	nw, err := s.WaitNewPrimary(old, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // writes go on to the new primary
	close(stop)
	r := <-done
	got, err := nw.DoArray("XRANGE", "s", "-", "+")
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, f := range got {
		on[f] = true // ids and fields flattened: an id is found among them
	}
	var lost []string
	for _, id := range r.acked {
		if !on[id] {
			lost = append(lost, id)
		}
	}
	t.Logf("%d adds acknowledged across the failover, %d failed (sent again by a caller), %d lost", len(r.acked), r.failed, len(lost))
	if len(r.acked) < 100 {
		t.Fatalf("only %d adds acknowledged: the writer did not run across the failover", len(r.acked))
	}
	if len(lost) > 0 {
		t.Fatalf("%d acknowledged adds are not on the new primary %s (first %s): they reached the old one after its replica's promotion", len(lost), nw.Addr, lost[0])
	}
}

// A primary that stops answering (paused: a partition) cannot close its
// connections itself: the gateway closes them when the sentinels announce
// the new primary (+switch-master), and the next connection through the
// same socket reaches the new one.
func TestSentinelSwitchClosesStalledConnections(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "pw"})
	_, sock := startSentinelGateway(t, s)
	held := dialAuthed(t, sock, s.Password)
	old, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Resume() })
	nw, err := s.WaitNewPrimary(old, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The held connection is closed by the gateway: EOF, not a timeout.
	_ = held.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := held.r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("the connection to the paused primary: %v, want EOF (closed by the gateway)", err)
	}
	c := wrapperClient(t, s, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	testkit.Eventually(t, "a new connection reaches the new primary", 10*time.Second, func() bool {
		return c.Set(ctx, "k", "v", 0).Err() == nil
	})
	if v, err := nw.DoArray("GET", "k"); err != nil || len(v) != 1 || v[0] != "v" {
		t.Fatalf("the new primary %s has k=%q (%v)", nw.Addr, v, err)
	}
}

// A sentinel that is down, or names no such master, is outvoted or
// fails the connection: the container's connection is closed, counted as
// a dial error, and the gateway goes on. Its logs never show the
// sentinels' password.
func TestSentinelLookupFailures(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{SentinelPassword: "sentinel-secret"})
	if err := s.Sentinels[2].Stop(); err != nil {
		t.Fatal(err)
	}
	_, sock := startSentinelGateway(t, s)
	if err := dialRaw(t, sock).ping(); err != nil {
		t.Fatalf("with one sentinel of three down: %v", err)
	}
	dir, logs := shortDir(t), &syncBuf{}
	g, c := startGatewayWith(t, Config{Dir: dir, Log: slog.New(slog.NewJSONHandler(logs, nil)),
		Redis: "redis+sentinel://" + s.Sentinels[0].Addr + "/nosuchmaster?sentinel_password=" + s.SentinelPassword})
	if err := c.Open(context.Background(), "w", nil); err != nil {
		t.Fatal(err)
	}
	if err := dialRaw(t, sockOf(dir, "w", RedisSocket)).ping(); err == nil {
		t.Fatal("a master the sentinels do not know was relayed")
	}
	testkit.Eventually(t, "the dial error counted", 5*time.Second, func() bool { return g.Stats()["w"].DialErrors == 1 })
	if l := logs.String(); !strings.Contains(l, "knows no master nosuchmaster") || strings.Contains(l, s.SentinelPassword) {
		t.Fatalf("the logs: want the lookup's error, never the sentinels' password:\n%s", l)
	}
}

func TestParseRedis(t *testing.T) {
	for _, tc := range []struct {
		in       string
		sentinel bool
		err      string
	}{
		{in: "127.0.0.1:6379"},
		{in: "redis+sentinel://a:26379,b/m/0?sentinel_username=u&sentinel_password=p", sentinel: true},
		{in: "rediss+sentinel://a/m", sentinel: true},
		{in: "redis+sentinel://:pw@a/m", err: "data user's credentials"},
		{in: "redis+sentinel://user:@a/m", err: "data user's credentials"},
		{in: "rediss://a:6380", err: "a rediss:// URL"},
		{in: "a", err: `got "a"`},
		{in: "u:pw@a:1", err: "an @ (credentials?)"},
	} {
		u, err := ParseRedis(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "pw") {
				t.Errorf("%s: %v, want an error with %q and no password", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || (u != nil) != tc.sentinel {
			t.Errorf("%s: %+v %v", tc.in, u, err)
		}
	}
}
