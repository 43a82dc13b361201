package gateway

// The relay against a hostile container, and the lifecycle around it:
// MaxConns, a panic, Stop, a Dir too long, a rename.

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/testkit"
)

// A container that opens connections without end gets MaxConns of them;
// the others are closed at once and the gateway goes on serving; bytes
// that are no Redis are relayed and answered by Redis, not the gateway.
func TestHostileContainer(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	g, err := New(Config{Dir: dir, Redis: r.Addr, MaxConns: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	c := NewClient(dir)
	ctx := context.Background()
	if err := c.Open(ctx, "h", nil); err != nil {
		t.Fatal(err)
	}
	var conns []*rawConn
	for range 5 {
		rc := dialRaw(t, sockOf(dir, "h", RedisSocket))
		if err := rc.ping(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, rc)
	}
	extra := dialRaw(t, sockOf(dir, "h", RedisSocket))
	if err := extra.ping(); err == nil {
		t.Fatal("a connection over MaxConns was served")
	}
	st, _ := c.Stats(ctx)
	if st["h"].Refused != 1 || st["h"].Open != 5 {
		t.Fatalf("stats %+v", st["h"])
	}
	conns[0].Close()
	testkit.Eventually(t, "a slot freed", 5*time.Second, func() bool {
		st, _ := c.Stats(ctx)
		return st["h"].Open == 4
	})
	junk := dialRaw(t, sockOf(dir, "h", RedisSocket))
	_, _ = junk.Write([]byte("\x00\xff*-1\r\n$-5\r\n\x16\x03\x01garbage\r\n"))
	_ = junk.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.ReadAll(junk)
	if err := conns[1].ping(); err != nil {
		t.Fatal(err)
	}
	if err := c.Open(ctx, "h2", nil); err != nil {
		t.Fatal(err)
	}
}

// Stop closes every listener and open connection; the client then says
// the gateway is not running, naming its socket.
func TestStopClosesEverything(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	g, err := New(Config{Dir: dir, Redis: r.Addr})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	c := NewClient(dir)
	ctx := context.Background()
	if err := c.Open(ctx, "s", nil); err != nil {
		t.Fatal(err)
	}
	conn := dialRaw(t, sockOf(dir, "s", RedisSocket))
	if err := conn.ping(); err != nil {
		t.Fatal(err)
	}
	stop, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := g.Stop(stop); err != nil {
		t.Fatal(err)
	}
	if err := conn.ping(); err == nil {
		t.Fatal("a connection survived Stop")
	}
	err = c.Open(ctx, "t", nil)
	want := "gateway: not running at " + filepath.Join(dir, ControlSocket)
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %s...", err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "s", WorkerFile)); err != nil {
		t.Fatalf("Stop removed a worker's directory: %v", err)
	}
}

// panicConn is a connection whose reads panic: what a bug reached by a
// container's bytes would do.
type panicConn struct {
	net.Conn
	closed chan struct{}
	once   sync.Once
}

func (p *panicConn) Read([]byte) (int, error) { panic("a bug in the relay") }
func (p *panicConn) Close() error {
	p.once.Do(func() { close(p.closed) })
	return p.Conn.Close()
}

// A panic in one connection's relay closes that connection and nothing
// else: the process, the worker and its other connections go on.
func TestPanicInRelayClosesOnlyThatConnection(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	g, c := startGateway(t, dir, r.Addr, "")
	ctx := context.Background()
	if err := c.Open(ctx, "p", nil); err != nil {
		t.Fatal(err)
	}
	other := dialRaw(t, sockOf(dir, "p", RedisSocket))
	if err := other.ping(); err != nil {
		t.Fatal(err)
	}
	w := g.workers.get("p")
	a, b := net.Pipe()
	defer b.Close()
	pc := &panicConn{Conn: a, closed: make(chan struct{})}
	if !w.take(pc, clientConn) {
		t.Fatal("not tracked")
	}
	done := make(chan struct{})
	go func() { defer close(done); g.redis.relay(w.side(RedisSocket), pc) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the relay did not end after its panic")
	}
	select {
	case <-pc.closed:
	default:
		t.Fatal("the panicking connection is still open")
	}
	if err := other.ping(); err != nil {
		t.Fatalf("another connection after the panic: %v", err)
	}
	if st := g.Stats()["p"]; st.Open != 1 {
		t.Fatalf("stats after the panic %+v", st)
	}
}

// A Dir so long that a worker's socket path would not fit is refused at
// New, not at the first Open.
func TestDirTooLong(t *testing.T) {
	_, err := New(Config{Dir: "/" + strings.Repeat("d", 40), Redis: "127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("%v", err)
	}
	if _, err := New(Config{Dir: "/run/agentvisor/gateway", Redis: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Dir: "/tmp/x", Redis: "redis://127.0.0.1:1/0"}); err == nil {
		t.Fatal("a Redis URL taken for host:port")
	}
}

// Rename hands a worker's directory to another id: a connection opened
// before goes on, the socket still answers under the directory's new
// name (as in a container that mounted the old one), Close of the new id
// closes it, and the old id is unknown.
func TestRenameKeepsTheSocketsAndConnections(t *testing.T) {
	r := testkit.StartRedis(t)
	dir := shortDir(t)
	_, c := startGateway(t, dir, r.Addr, "")
	ctx := context.Background()
	for _, id := range []string{"warm", "other"} {
		if err := c.Open(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	before := dialRaw(t, sockOf(dir, "warm", RedisSocket))
	if err := before.ping(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Rename(ctx, "warm", "other"); err == nil {
		t.Fatal("a rename onto an open worker was taken")
	}
	info, err := c.Rename(ctx, "warm", "woken")
	if err != nil || info.WorkerID != "woken" {
		t.Fatalf("rename: %+v %v", info, err)
	}
	if err := before.ping(); err != nil {
		t.Fatalf("the connection opened before the rename: %v", err)
	}
	if err := dialRaw(t, sockOf(dir, "woken", RedisSocket)).ping(); err != nil {
		t.Fatalf("the socket under the new name: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "woken", WorkerFile))
	if err != nil || !strings.Contains(string(b), `"woken"`) {
		t.Fatalf("worker.json after the rename: %s %v", b, err)
	}
	ids, err := c.Workers(ctx)
	if err != nil || !slices.Equal(ids, []string{"other", "woken"}) {
		t.Fatalf("workers %v %v", ids, err)
	}
	if _, err := c.Rename(ctx, "warm", "again"); err == nil {
		t.Fatal("the old id renamed again")
	}
	if err := c.Close(ctx, "woken"); err != nil {
		t.Fatal(err)
	}
	if err := before.ping(); err == nil {
		t.Fatal("the connection answers after Close of the new id")
	}
}
