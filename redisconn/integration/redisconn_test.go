// Package integration holds redisconn's tests against real Redis
// servers, sentinels and proxies (testkit). It is a module of its own so
// that redisconn requires no test-only module: a consumer's go mod tidy
// reads redisconn's tests, not these.
package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/testkit"
)

// A plain Redis without replicas: WAIT off costs nothing, and WAIT on
// comes back short after its timeout, the entry kept.
func TestWaitWithoutReplicas(t *testing.T) {
	r := testkit.StartRedis(t)
	c, err := redisconn.Open(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	args := &redis.XAddArgs{Stream: "s", Values: []any{"data", "{}"}}
	t0 := time.Now()
	if _, err := redisconn.XAdd(ctx, c, protocol.WaitPolicy{}, args); err != nil || time.Since(t0) > time.Second {
		t.Fatalf("WAIT off: %v after %s", err, time.Since(t0))
	}
	t0 = time.Now()
	id, err := redisconn.XAdd(ctx, c, protocol.WaitPolicy{Replicas: 1, Timeout: 100 * time.Millisecond}, args)
	if !redisconn.IsNotReplicated(err) || time.Since(t0) < 100*time.Millisecond {
		t.Fatalf("WAIT 1 without a replica: %v after %s; want a NotReplicatedError after the timeout", err, time.Since(t0))
	}
	if n, _ := c.XLen(ctx, "s").Result(); n != 2 || id == "" {
		t.Fatalf("%d entries, id %q; want 2 (nothing added twice)", n, id)
	}
}

// Through the sentinels: the client finds the primary, WAIT sees the
// replica, and after a forced failover the same client writes to the new
// primary with nothing lost.
func TestSentinelClientFollowsFailover(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "pw", SentinelPassword: "spw"})
	c, err := redisconn.Open(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := protocol.WaitPolicy{Replicas: 1, Timeout: protocol.DefaultRedisWaitTimeout}
	var ids []string
	short := 0
	add := func() error {
		id, err := redisconn.XAdd(ctx, c, p, &redis.XAddArgs{Stream: "s", Values: []any{"data", "{}"}})
		if redisconn.IsNotReplicated(err) {
			short, err = short+1, nil // on the new primary before its replica is back
		}
		if err == nil {
			ids = append(ids, id)
		}
		return err
	}
	if err := add(); err != nil {
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
	n, err := c.XLen(ctx, "s").Result()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := nw.Do("XLEN", "s")
	t.Logf("%d entries added across the failover (%d not acknowledged by a replica: the new primary had none yet), the new primary %s has %s",
		len(ids), short, nw.Addr, got)
	if n != int64(len(ids)) {
		t.Fatalf("the stream has %d entries, %d were confirmed", n, len(ids))
	}
}

// From a replica's promotion to the end of the failover, the old primary
// still takes writes that its demotion drops: the primary a look for an
// entry asks (NamedPrimary) is never the old one once the replica is
// promoted, although most sentinels name it until the failover ends.
func TestNamedPrimaryIsNeverTheOldOneAfterAPromotion(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "pw", SentinelPassword: "spw"})
	o, err := redisconn.Options(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	replica := s.Servers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var promoted atomic.Bool
	go func() {
		for ctx.Err() == nil {
			if r, _ := replica.DoArray("ROLE"); len(r) > 0 && r[0] == "master" {
				promoted.Store(true)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	if err := s.Failover(); err != nil {
		t.Fatal(err)
	}
	refused, wrong := 0, 0
	for ctx.Err() == nil {
		after := promoted.Load()
		addr, err := redisconn.NamedPrimary(ctx, o)
		switch {
		case err != nil:
			refused++
		case addr == old.Addr && after:
			wrong++
		case addr == replica.Addr:
			t.Logf("the new primary named; %d lookups refused while the sentinels failed over", refused)
			if wrong > 0 {
				t.Fatalf("the old primary %s was named %d times after its replica's promotion", old.Addr, wrong)
			}
			if refused == 0 {
				t.Fatal("no lookup was refused during the failover: the test saw none of it")
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the new primary was never named (wrong %d, refused %d)", wrong, refused)
}

// A WAIT whose connection breaks (the primary gone, as far as the client
// can tell) is followed by a look for the entry: found, it is confirmed
// and not added again.
func TestXAddConfirmsAfterALostWait(t *testing.T) {
	r := testkit.StartRedis(t)
	proxy := testkit.StartProxy(t, r.Addr)
	o, err := redisconn.Options(proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	o.MaxRetries = -1 // go-redis would send the pipeline again itself
	c := redisconn.NewClient(o)
	defer c.Close()
	var armed atomic.Bool
	armed.Store(true)
	proxy.SetCut(func(rep testkit.Reply) testkit.Cut {
		if rep.Name() == "WAIT" && armed.CompareAndSwap(true, false) {
			return testkit.DropReply
		}
		return testkit.Forward
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := redisconn.XAdd(ctx, c, protocol.WaitPolicy{Replicas: 1, Timeout: 200 * time.Millisecond}, &redis.XAddArgs{Stream: "s", Values: []any{"data", "{}"}})
	if err != nil || id == "" || armed.Load() {
		t.Fatalf("XAdd after a lost WAIT reply: %q, %v (cut made: %v)", id, err, !armed.Load())
	}
	if n, _ := c.XLen(ctx, "s").Result(); n != 1 {
		t.Fatalf("%d entries, want 1", n)
	}
}

// Through a unix socket (a sealed worker's gateway): every connection
// goes through it, with the URL's credentials; a sentinel URL cannot.
func TestThroughSocket(t *testing.T) {
	r := testkit.StartRedisWith(t, testkit.RedisOptions{Password: "pw-0c1d"})
	path, accepted := testkit.UnixRelay(t, r.Addr)
	o, err := redisconn.Options("redis://:pw-0c1d@redis.invalid:6379/0") // the name never resolves: only the socket is dialled
	if err != nil {
		t.Fatal(err)
	}
	if err := redisconn.ThroughSocket(o, path); err != nil {
		t.Fatal(err)
	}
	c := redisconn.NewClient(o)
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the socket: %v", err)
	}
	if v, err := r.Client(t).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("the server has %q, %v", v, err)
	}
	if accepted() == 0 {
		t.Fatal("the socket saw no connection")
	}
	so, _ := redisconn.Options("redis+sentinel://h:26379/m")
	if err := redisconn.ThroughSocket(so, path); err == nil {
		t.Fatal("a sentinel URL went through a socket")
	}
}
