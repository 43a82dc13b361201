// Package redistest starts a real redis-server for the client's own
// tests. It lives in the client module, and needs nothing beyond what the
// client does, so that the module requires no test-only module of the
// project (a consumer's go mod tidy then fetches nothing it does not use).
package redistest

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Server is a redis-server of one test, on a loopback port of its own.
type Server struct {
	Addr     string
	Password string // requirepass; empty: none
}

// Start starts a redis-server with password (empty: none) and stops it
// when the test ends. A missing redis-server fails the test: make setup
// installs it.
func Start(t testing.TB, password string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH (make setup installs it): %v", err)
	}
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
		if password != "" {
			args = append(args, "--requirepass", password)
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = nil, nil
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Password: password}
		if s.ready() {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_, _ = cmd.Process.Wait()
			})
			return s
		}
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		if attempt == 4 {
			t.Fatalf("redis-server did not answer on 127.0.0.1:%d (log in %s)", port, filepath.Join(dir, "redis.log"))
		}
	}
}

// ready waits up to 5 s for the server to answer PING.
func (s *Server) ready() bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, MaxRetries: -1})
	defer c.Close()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return true
		}
	}
	return false
}

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password})
	t.Cleanup(func() { c.Close() })
	return c
}

// NewClient starts a server without a password and returns a client of it.
func NewClient(t testing.TB) *redis.Client {
	t.Helper()
	return Start(t, "").Client(t)
}

// XAdd and Doc are testkit's, written again here: the client module may
// not require testkit (a consumer's go mod tidy would need it).
//
// XAdd appends an encoded protocol document to a stream, and fails the
// test when Redis refuses it.
func XAdd(t testing.TB, rc redis.Cmdable, stream string, doc []byte) {
	t.Helper()
	if err := rc.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
		t.Fatal(err)
	}
}

// Doc encodes a protocol document; an encoding error is a bug of the
// test, so it panics.
func Doc(v interface{ Encode() ([]byte, error) }) []byte {
	doc, err := v.Encode()
	if err != nil {
		panic(err)
	}
	return doc
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
