package testkit

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestRedisStartsAnswersAndStops(t *testing.T) {
	r := StartRedis(t)
	if !strings.HasPrefix(r.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q, want a loopback address", r.Addr)
	}
	if got, err := r.Do("PING"); err != nil || got != "+PONG" {
		t.Fatalf("PING = %q, %v; want +PONG", got, err)
	}
	if _, err := r.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", r.Addr, 200*time.Millisecond); err == nil {
		t.Fatal("port still accepts connections after Stop")
	}
	if err := r.Start(); err != nil {
		t.Fatalf("restart on the same port: %v", err)
	}
	if got, err := r.Do("PING"); err != nil || got != "+PONG" {
		t.Fatalf("PING after restart = %q, %v", got, err)
	}
	if err := r.Start(); err == nil {
		t.Fatal("starting a running server gave no error")
	}
}

func TestRedisWithPassword(t *testing.T) {
	r := StartRedisWith(t, RedisOptions{Password: "s3cret"})
	if !strings.Contains(r.URL(), ":s3cret@") {
		t.Fatalf("URL %q lacks the password", r.URL())
	}
	if got, err := r.Do("PING"); err != nil || got != "+PONG" {
		t.Fatalf("PING with AUTH = %q, %v", got, err)
	}
}

func TestRedisRemovedWhenTestEnds(t *testing.T) {
	var dir, addr string
	t.Run("inner", func(t *testing.T) {
		r := StartRedis(t)
		dir, addr = r.Dir, r.Addr
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir %s still exists after the test: %v", dir, err)
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatalf("redis-server on %s still runs after the test", addr)
	}
}

func TestTwoServersGetDistinctPorts(t *testing.T) {
	a, b := StartRedis(t), StartRedis(t)
	if a.Port == b.Port {
		t.Fatalf("both servers on port %d", a.Port)
	}
}

func TestDockerAnswers(t *testing.T) {
	RequireDocker(t)
}

func TestPingDockerFailsOnMissingSocket(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/none.sock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := PingDocker(ctx); err == nil {
		t.Fatal("PingDocker on a missing socket gave no error")
	}
}
