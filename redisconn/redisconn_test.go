package redisconn

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

func TestOptions(t *testing.T) {
	o, err := Options("rediss+sentinel://agentvisor%3Aworker%3Aw1:pw@h1:1,h2:2/main/3?sentinel_password=sp&sentinel_username=su")
	if err != nil {
		t.Fatal(err)
	}
	if o.MasterName != "main" || len(o.Addrs) != 2 || o.DB != 3 || o.Username != "agentvisor:worker:w1" || o.Password != "pw" ||
		o.SentinelUsername != "su" || o.SentinelPassword != "sp" || o.TLSConfig == nil {
		t.Fatalf("options %+v", o)
	}
	o, err = Options("redis://:pw@h:7/2")
	if err != nil || o.MasterName != "" || o.Addrs[0] != "h:7" || o.DB != 2 || o.Password != "pw" || o.TLSConfig != nil {
		t.Fatalf("options %+v, %v", o, err)
	}
	_, err = Options("redis+sentinel://:s3cret@h1:1")
	if !errors.Is(err, protocol.ErrBadRedisURL) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a sentinel URL without master: %v", err)
	}
}

func TestPolicy(t *testing.T) {
	t.Setenv(protocol.EnvRedisWaitReplicas, "")
	t.Setenv(protocol.EnvRedisWaitTimeout, "")
	if p, err := Policy("redis://h:1/0"); err != nil || p.On() {
		t.Fatalf("plain URL: %+v, %v; want WAIT off", p, err)
	}
	if p, err := Policy("redis+sentinel://h:1/m"); err != nil || p.Replicas != 1 || p.Timeout != protocol.DefaultRedisWaitTimeout {
		t.Fatalf("sentinel URL: %+v, %v; want 1 replica, 500 ms", p, err)
	}
	t.Setenv(protocol.EnvRedisWaitReplicas, "0")
	if p, _ := Policy("redis+sentinel://h:1/m"); p.On() {
		t.Fatal("REDIS_WAIT_REPLICAS=0 left WAIT on")
	}
}

// A sentinel that does not answer (hung, partitioned) is asked once: the
// fallback for a user not allowed SENTINEL MASTER is for an error reply,
// not for a timeout, which asking again would only double.
func TestAHungSentinelIsAskedOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var commands atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "*") { // a command: never answered
						commands.Add(1)
					}
				}
			}()
		}
	}()
	sc := redis.NewSentinelClient(&redis.Options{Addr: l.Addr().String(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond,
		DialTimeout: time.Second, Protocol: 2, DisableIdentity: true})
	defer sc.Close()
	if _, err := askSentinel(context.Background(), sc, "m"); err == nil {
		t.Fatal("a hung sentinel answered")
	}
	if n := commands.Load(); n != 1 {
		t.Fatalf("the hung sentinel was sent %d commands, want 1", n)
	}
}
