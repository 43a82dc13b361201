package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/testkit"
)

// startGateway serves a Gateway on dir relaying to redisAddr (and
// modelAddr), stopped when the test ends.
func startGateway(t *testing.T, dir, redisAddr, modelAddr string) (*Gateway, *Client) {
	t.Helper()
	return startGatewayWith(t, Config{Dir: dir, Redis: redisAddr, Model: modelAddr})
}

// startGatewayWith starts a gateway of cfg, stopped when the test ends.
func startGatewayWith(t *testing.T, cfg Config) (*Gateway, *Client) {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return g, NewClient(cfg.Dir)
}

// shortDir is a directory for sockets: a unix socket's path has at most
// 107 bytes, which t.TempDir's long names may exceed.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := mkdirShort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func mkdirShort() (string, error) { return os.MkdirTemp("", "gw") }

func redisOverSocket(t *testing.T, sock string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn is a connection to a worker socket speaking inline Redis.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, sock string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c, bufio.NewReader(c)}
}

func (c *rawConn) ping() error {
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func sockOf(dir, id, name string) string { return filepath.Join(dir, id, name) }

// A Redis client in a worker uses the gateway as it would Redis: PING,
// SET and GET through redis.sock reach the real server, and the stats
// count the connection and its bytes.
func TestRedisThroughSocket(t *testing.T) {
	r, direct := testkit.StartRedisClient(t)
	dir := shortDir(t)
	_, c := startGateway(t, dir, r.Addr, "")
	ctx := context.Background()
	if err := c.Open(ctx, "w1", []string{"api.example.com:443"}); err != nil {
		t.Fatal(err)
	}
	rc := redisOverSocket(t, sockOf(dir, "w1", RedisSocket))
	if got, err := rc.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING: %q %v", got, err)
	}
	if err := rc.Set(ctx, "k", "through the gateway", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := direct.Get(ctx, "k").Result(); err != nil || got != "through the gateway" {
		t.Fatalf("GET direct: %q %v", got, err)
	}
	big := strings.Repeat("x", 1<<20)
	if err := direct.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rc.Get(ctx, "big").Result(); err != nil || got != big {
		t.Fatalf("GET of 1 MiB through the gateway: %d bytes, %v", len(got), err)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := st["w1"]
	if s.Accepted < 1 || s.Open < 1 || s.BytesUp < 20 || s.BytesDown < 1<<20 {
		t.Fatalf("stats %+v", s)
	}
	b, err := os.ReadFile(filepath.Join(dir, "w1", WorkerFile))
	if err != nil {
		t.Fatal(err)
	}
	var spec WorkerSpec
	if err := json.Unmarshal(b, &spec); err != nil || spec.WorkerID != "w1" || !slices.Equal(spec.Allow, []string{"api.example.com:443"}) {
		t.Fatalf("worker.json %s %v", b, err)
	}
}

// Two workers' sockets are separate: closing one cuts its open
// connections, removes its directory and leaves the other's working.
func TestCloseCutsOnlyThatWorker(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	_, c := startGateway(t, dir, r.Addr, "")
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := c.Open(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	ca, cb := dialRaw(t, sockOf(dir, "a", RedisSocket)), dialRaw(t, sockOf(dir, "b", RedisSocket))
	if err := ca.ping(); err != nil {
		t.Fatal(err)
	}
	if err := cb.ping(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := ca.ping(); err == nil {
		t.Fatal("a's open connection still answers after Close(a)")
	}
	if err := cb.ping(); err != nil {
		t.Fatalf("b's connection cut by Close(a): %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Fatalf("a's directory: %v", err)
	}
	if _, err := net.Dial("unix", sockOf(dir, "a", RedisSocket)); err == nil {
		t.Fatal("a's socket still accepts")
	}
	ids, err := c.Workers(ctx)
	if err != nil || !slices.Equal(ids, []string{"b"}) {
		t.Fatalf("workers %v %v", ids, err)
	}
	// Closing again, or closing a worker never opened, is no error.
	for _, id := range []string{"a", "never-opened"} {
		if err := c.Close(ctx, id); err != nil {
			t.Fatalf("Close(%s): %v", id, err)
		}
	}
	if err := dialRaw(t, sockOf(dir, "b", RedisSocket)).ping(); err != nil {
		t.Fatal(err)
	}
}

// staleControlSocket leaves a socket file nobody listens on, as a gateway
// killed with SIGKILL leaves its control socket.
func staleControlSocket(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, ControlSocket)
	_ = os.Remove(p)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

// A gateway that ended without cleaning up (its socket files left where
// they were) and started again on the same Dir serves the same workers,
// on the same paths.
func TestRestartServesTheSameWorkers(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	g1, err := New(Config{Dir: dir, Redis: r.Addr})
	if err != nil {
		t.Fatal(err)
	}
	if err := g1.Start(); err != nil {
		t.Fatal(err)
	}
	c := NewClient(dir)
	ctx := context.Background()
	for _, id := range []string{"w1", "w2"} {
		if err := c.Open(ctx, id, []string{id + ".example.com:443"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	staleControlSocket(t, dir)
	for _, id := range []string{"w1", "w2"} {
		if fi, err := os.Lstat(sockOf(dir, id, RedisSocket)); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Fatalf("%s: the stale socket file is not there: %v", id, err)
		}
		if _, err := net.Dial("unix", sockOf(dir, id, RedisSocket)); err == nil {
			t.Fatalf("%s: a stopped gateway's socket accepts", id)
		}
	}
	if _, err := c.Workers(ctx); err == nil || !strings.Contains(err.Error(), "gateway: not running at "+filepath.Join(dir, ControlSocket)) {
		t.Fatalf("a stopped gateway's client: %v", err)
	}

	_, c2 := startGateway(t, dir, r.Addr, "")
	ids, err := c2.Workers(ctx)
	if err != nil || !slices.Equal(ids, []string{"w1", "w2"}) {
		t.Fatalf("workers after restart %v %v", ids, err)
	}
	for _, id := range []string{"w1", "w2"} {
		if err := dialRaw(t, sockOf(dir, id, RedisSocket)).ping(); err != nil {
			t.Fatalf("%s after restart: %v", id, err)
		}
		if fi, err := os.Stat(sockOf(dir, id, RedisSocket)); err != nil || fi.Mode().Perm() != WorkerSocketMode {
			t.Fatalf("%s: %v %v", id, fi.Mode(), err)
		}
	}
	// A second gateway on the same Dir refuses to start.
	g3, _ := New(Config{Dir: dir, Redis: r.Addr})
	if err := g3.Start(); err == nil || !strings.Contains(err.Error(), "another gateway serves") {
		t.Fatalf("a second gateway on one Dir: %v", err)
	}
}

// Ids that are no plain name are refused with a message saying what an id
// is, and make nothing on disk.
func TestBadIDsRefused(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	_, c := startGateway(t, dir, r.Addr, "")
	ctx := context.Background()
	bad := []string{"", "..", ".", "../etc", "a/b", ".hidden", "-lead", "a b", "a.b", strings.Repeat("x", 65), "ü", "a\x00b"}
	for _, id := range bad {
		if err := c.Open(ctx, id, nil); err == nil || !strings.Contains(err.Error(), "invalid worker id") {
			t.Errorf("Open(%q): %v", id, err)
		}
		if err := c.Close(ctx, id); err == nil {
			t.Errorf("Close(%q) accepted", id)
		}
	}
	// The same ids sent to the control socket as they are.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", filepath.Join(dir, ControlSocket))
	}}}
	for _, p := range []string{"/workers/..%2Fescape", "/workers/a%2Fb", "/workers/.hidden", "/workers/" + strings.Repeat("x", 65), "/workers/a%00b"} {
		for _, m := range []string{http.MethodPut, http.MethodDelete} {
			req, _ := http.NewRequest(m, "http://gateway"+p, strings.NewReader(`{}`))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid worker id") {
				t.Errorf("%s %s: %s %s", m, p, resp.Status, b)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodPut, "http://gateway/workers/w1", strings.NewReader(`{"worker_id":"w2"}`))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "is not the path's") {
		t.Errorf("worker_id other than the path's: %s %s", resp.Status, b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != ControlSocket {
		t.Fatalf("bad ids made files: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); !os.IsNotExist(err) {
		t.Fatal("a path traversal made a directory")
	}
	if ids, err := c.Workers(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("%v %v", ids, err)
	}
}

// The control socket is root's alone; the worker's directory is
// traversable by the container's uid and its sockets are that uid's and
// root's alone, whatever the gateway's umask.
func TestModes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	r := testkit.StartRedis(t)
	model := httptest.NewServer(http.NotFoundHandler())
	defer model.Close()
	dir := shortDir(t)
	_, c := startGateway(t, dir, r.Addr, model.Listener.Addr().String())
	if err := c.Open(context.Background(), "w1", nil); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		filepath.Join(dir, ControlSocket):  os.ModeSocket | 0o600,
		filepath.Join(dir, "w1"):           os.ModeDir | 0o755,
		sockOf(dir, "w1", RedisSocket):     os.ModeSocket | 0o600,
		sockOf(dir, "w1", ModelSocket):     os.ModeSocket | 0o600,
		sockOf(dir, "w1", EgressSocket):    os.ModeSocket | 0o600,
		sockOf(dir, "w1", WorkerFile):      0o600,
		filepath.Join(dir, "w1", ".stage"): 0, // no staging left behind
	} {
		fi, err := os.Lstat(p)
		if want == 0 {
			if err == nil {
				t.Errorf("%s exists", p)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
		owner := uint32(os.Getuid())
		if fi.Mode().Type() == os.ModeSocket && filepath.Base(p) != ControlSocket {
			owner = DefaultWorkerUID // the container's
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != owner {
			t.Errorf("%s: owner %d, want %d", p, st.Uid, owner)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "w1"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{EgressSocket, ModelSocket, RedisSocket, WorkerFile}) {
		t.Fatalf("a worker's directory holds %v", names)
	}
}

// Open answers once the sockets serve: a connection made right after it
// is relayed at once. Opening again (even many times at once) keeps the
// worker and its open connections, and stores the new allowlist.
func TestOpenIdempotentAndReady(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	g, c := startGateway(t, dir, r.Addr, "")
	ctx := context.Background()
	for i := range 20 {
		id := fmt.Sprintf("ready-%d", i)
		if err := c.Open(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
		if err := dialRaw(t, sockOf(dir, id, RedisSocket)).ping(); err != nil {
			t.Fatalf("%s: the first connection after Open: %v", id, err)
		}
	}
	conn := dialRaw(t, sockOf(dir, "ready-0", RedisSocket))
	if err := conn.ping(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() { errs <- c.Open(ctx, "ready-0", []string{"x:1"}) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.ping(); err != nil {
		t.Fatalf("an open connection cut by Open again: %v", err)
	}
	if ids := g.Workers(); len(ids) != 20 {
		t.Fatalf("%d workers", len(ids))
	}
	b, _ := os.ReadFile(filepath.Join(dir, "ready-0", WorkerFile))
	if !strings.Contains(string(b), `"allow":["x:1"]`) {
		t.Fatalf("worker.json after Open again: %s", b)
	}
	// A worker whose socket was removed under it is served again by Open.
	os.Remove(sockOf(dir, "ready-1", RedisSocket))
	if err := c.Open(ctx, "ready-1", nil); err != nil {
		t.Fatal(err)
	}
	if err := dialRaw(t, sockOf(dir, "ready-1", RedisSocket)).ping(); err != nil {
		t.Fatal(err)
	}
}

// When the container closes its write side, the upstream sees the end of
// the request and its answer still comes back (half-close both ways).
func TestHalfClose(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the client's CloseWrite
				fmt.Fprintf(c, "got %d bytes", len(b))
			}()
		}
	}()
	dir := shortDir(t)
	_, c := startGateway(t, dir, up.Addr().String(), "")
	if err := c.Open(context.Background(), "hc", nil); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", sockOf(dir, "hc", RedisSocket))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(make([]byte, 100000)); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil || string(b) != "got 100000 bytes" {
		t.Fatalf("%q %v", b, err)
	}
}

// An upstream that refuses closes the container's connection at once; the
// gateway goes on serving.
func TestDialFailureClosesConnection(t *testing.T) {
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	_, c := startGateway(t, dir, fmt.Sprintf("127.0.0.1:%d", port), "")
	ctx := context.Background()
	if err := c.Open(ctx, "df", nil); err != nil {
		t.Fatal(err)
	}
	conn := dialRaw(t, sockOf(dir, "df", RedisSocket))
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read: %d %v, want EOF", n, err)
	}
	testkit.Eventually(t, "the refused connection counted", 5*time.Second, func() bool {
		st, _ := c.Stats(ctx)
		return st["df"].DialErrors == 1 && st["df"].Open == 0
	})
	if _, err := c.Workers(ctx); err != nil {
		t.Fatal(err)
	}
}
