package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// What every server of a worker's socket shares: how a socket is made,
// how its connections become the worker's, and how bytes are relayed.

// listenUnix listens on dir/name with the given mode and owner (uid; -1:
// the gateway's), replacing a stale socket file there. The socket is made
// in a private directory (0700) of root, given its mode and owner, then
// renamed into place: nobody connects to it before it has them, whatever
// the umask, and a client connecting meanwhile reaches either the old
// file or the new socket.
func listenUnix(root, dir, name string, mode os.FileMode, uid int) (*unixListener, error) {
	stage, err := os.MkdirTemp(root, ".stage-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	tmp := filepath.Join(stage, name)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// The path the listener was made on is gone once renamed; the gateway
	// removes the files it means to remove itself.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, mode); err != nil {
		l.Close()
		return nil, err
	}
	if uid >= 0 && uid != os.Geteuid() {
		if err := os.Lchown(tmp, uid, -1); err != nil {
			l.Close()
			return nil, fmt.Errorf("give the socket to uid %d (the containers' uid, GATEWAY_WORKER_UID; the gateway must be root or that uid): %w", uid, err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		l.Close()
		return nil, err
	}
	return &unixListener{l, filepath.Join(dir, name)}, nil
}

// unixListener is a listener whose Addr is the path it serves on. The
// path changes when its worker is renamed (worker.mu held).
type unixListener struct {
	*net.UnixListener
	path string
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// connKind says whose end a connection is: the container's (counted in
// WorkerStats.Open and bounded by Config.MaxConns) or an upstream's.
type connKind int

const (
	clientConn connKind = iota
	upstreamConn
)

// connOwner is the worker a connection belongs to: it counts and bounds
// the container's connections and closes them all when it closes.
type connOwner interface {
	// take makes c the worker's, or closes it and reports false (the
	// worker closed, or a container at MaxConns).
	take(c net.Conn, kind connKind) bool
	// drop forgets c, once closed.
	drop(c net.Conn, kind connKind)
}

// workerSide is what the server of one worker's socket is given of its
// worker: the worker's life (done when it is closed), its connections,
// its counters, and a log whose lines name it.
type workerSide struct {
	ctx      context.Context
	socket   string // the socket's name (RedisSocket, ...)
	conns    connOwner
	stats    *counters
	refusals *refusalLog
	log      *slog.Logger
}

// refused keeps r, made on this socket, in the worker's refusal log.
func (s workerSide) refused(r Refusal) {
	r.Socket = s.socket
	s.refusals.add(r)
}

// serveHTTP serves srv (model.sock's or egress.sock's) on l until the
// worker is closed; the connections it accepts are the worker's. Serve
// ending otherwise is logged and started again after a pause.
func serveHTTP(side workerSide, srv *http.Server, l *unixListener, what string) {
	tl := &trackingListener{unixListener: l, side: side}
	for {
		err := srv.Serve(tl)
		if side.ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
			return
		}
		side.log.Warn(what, "err", err)
		if !pause(side.ctx, 100*time.Millisecond) {
			return
		}
	}
}

// trackingListener hands out connections the worker has taken.
type trackingListener struct {
	*unixListener
	side workerSide
}

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.unixListener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.side.conns.take(c, clientConn) {
			continue // over MaxConns, or the worker closed: closed already
		}
		return &trackedConn{Conn: c, side: l.side}, nil
	}
}

// trackedConn is a container's connection that the worker drops when it
// is closed.
type trackedConn struct {
	net.Conn
	side workerSide
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.side.conns.drop(c.Conn, clientConn) })
	return err
}

// Read and Write count the bytes of every connection of an HTTP socket,
// egress tunnels and plain HTTP alike, headers included.
func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.side.stats.bytesUp.Add(int64(n))
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.side.stats.bytesDown.Add(int64(n))
	return n, err
}

func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// relayBoth copies bytes both ways between the container's connection c
// and its upstream up until both ways are done: c's bytes are counted
// into sent, up's into got. A panic closes both, logged as msg: one
// connection's bug ends that connection only.
func relayBoth(c, up net.Conn, sent, got *atomic.Int64, log *slog.Logger, msg string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				log.Error(msg, "panic", p, "stack", string(debug.Stack()))
				c.Close()
				up.Close()
			}
		}()
		pipe(up, c, sent)
	}()
	pipe(c, up, got)
	<-done
}

// pipe copies src to dst, counting bytes into n as they go. At src's end
// it closes dst's write side, so that the other side sees the end of what
// was sent and may still answer (half-close); on an error it closes both.
func pipe(dst, src net.Conn, n *atomic.Int64) {
	buf := make([]byte, 16<<10)
	for {
		k, rerr := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				src.Close()
				dst.Close()
				return
			}
			n.Add(int64(k))
		}
		if rerr == io.EOF {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				if cw.CloseWrite() == nil {
					return
				}
			}
			dst.Close()
			return
		}
		if rerr != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

// pause waits d, or until ctx is done: it reports whether the wait ran
// its course (false: stop).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitGroup waits for wg until ctx is done.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newErrorLog is the log.Logger of a worker's HTTP server and proxies:
// what net/http reports of a container's connections (a bad request, a
// reset) is for debugging, not an error of the gateway.
func newErrorLog(log *slog.Logger) *stdlog.Logger {
	return slog.NewLogLogger(log.Handler(), slog.LevelDebug)
}
