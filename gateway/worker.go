package gateway

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/agentvisor/agentvisor/protocol"
)

// worker is one open worker, the one owner of its state: what the
// manager said of it (its spec), its sockets, the connections on them,
// and its counters. The servers of its sockets reach it through the
// calls they declare (connOwner, egressWorker, tokenChecker), never
// through each other.
type worker struct {
	id       atomic.Pointer[string] // the worker's id now (a rename changes it): read by every log line
	ctx      context.Context        // done when the worker is closed: ends its dials, waits and retries
	cancel   context.CancelFunc
	maxConns int
	log      *slog.Logger // the gateway's; logger adds worker_id and the socket
	stats    counters
	refusals *refusalLog // what the gateway refused the worker, on every socket

	// allow and modelToken are s.Allow parsed and s.ModelToken, read at
	// each request without w.mu; setSpec changes them with s.
	allow      atomic.Pointer[allowlist]
	modelToken atomic.Pointer[string]
	// grant is where the worker may push (gitpush.go), as its wrapper
	// put it for the task in flight; nil: nowhere. Kept in its directory
	// too (gitgrant.go), so that a restarted gateway has it.
	grant atomic.Pointer[pushGrant]

	mu        sync.Mutex
	dir       string
	s         WorkerSpec
	closed    bool
	listeners []*unixListener
	servers   []interface{ close() } // the HTTP servers of its sockets: closed with it
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup // every goroutine serving the worker, and every connection it holds
}

// The calls the servers of a worker's sockets make of it.
var (
	_ connOwner    = (*worker)(nil)
	_ egressWorker = (*worker)(nil)
	_ tokenChecker = (*worker)(nil)
)

// newWorker is worker spec.WorkerID in dir, not serving yet; parent's end
// closes it.
func newWorker(parent context.Context, spec WorkerSpec, allow allowlist, dir string, maxConns int, log *slog.Logger) *worker {
	ctx, cancel := context.WithCancel(parent)
	w := &worker{ctx: ctx, cancel: cancel, maxConns: maxConns, log: log, dir: dir, s: spec, conns: map[net.Conn]struct{}{},
		refusals: newRefusalLog()}
	w.id.Store(&spec.WorkerID)
	w.allow.Store(&allow)
	w.modelToken.Store(&spec.ModelToken)
	return w
}

// ID returns the worker's id now.
func (w *worker) ID() string { return *w.id.Load() }

// side is what the server of the worker's socket named socket is given of
// the worker.
func (w *worker) side(socket string) workerSide {
	return workerSide{ctx: w.ctx, socket: socket, conns: w, stats: &w.stats, refusals: w.refusals, log: w.logger(socket)}
}

// logger is the log of one of the worker's sockets: each line names the
// worker's id as it is when the line is written (a rename, a warm pool
// worker's container given to a woken worker, changes it).
func (w *worker) logger(socket string) *slog.Logger {
	return slog.New(idHandler{h: w.log.Handler(), w: w}).With("socket", socket)
}

func (w *worker) spec() WorkerSpec {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.s
}

func (w *worker) setSpec(s WorkerSpec, allow allowlist) {
	w.mu.Lock()
	w.s = s
	w.allow.Store(&allow)
	w.modelToken.Store(&s.ModelToken)
	w.mu.Unlock()
}

// rename makes the worker to, in dir (renamed already), and returns its
// spec as worker.json must now say.
func (w *worker) rename(to, dir string) WorkerSpec {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.id.Store(&to)
	w.dir = dir
	w.s.WorkerID = to
	for _, l := range w.listeners {
		l.path = filepath.Join(dir, filepath.Base(l.path))
	}
	return w.s
}

// allows reports whether the worker's own allowlist allows t.
func (w *worker) allows(t target) bool { return w.allow.Load().allows(t) }

// scope is what a credential may be scoped to: the worker's id and
// project.
func (w *worker) scope() (id, project string) {
	s := w.spec()
	return s.WorkerID, s.ProjectID
}

// pushGrant is where the worker may push now (nil: nowhere).
func (w *worker) pushGrant() *pushGrant { return w.grant.Load() }

// setPushGrant replaces it with g, parsed from raw (nil, nil: no
// grant), kept in the worker's directory first (gitgrant.go).
func (w *worker) setPushGrant(raw *GitGrant, g *pushGrant) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := writeGrant(w.dir, raw); err != nil {
		return err
	}
	w.grant.Store(g)
	return nil
}

// modelTokenOK says whether got is the worker's token (none: nothing is).
func (w *worker) modelTokenOK(got string) bool {
	want := *w.modelToken.Load()
	return want != "" && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// intact reports whether every socket file the worker listens on is still
// there.
func (w *worker) intact() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.listeners {
		if fi, err := os.Lstat(l.path); err != nil || fi.Mode().Type() != os.ModeSocket {
			return false
		}
	}
	return !w.closed
}

// serve runs serve(l) for the worker until it returns: l and srv (nil for
// none) are closed with the worker, and wait waits for serve.
func (w *worker) serve(l *unixListener, srv interface{ close() }, serve func(*unixListener)) {
	w.mu.Lock()
	w.listeners = append(w.listeners, l)
	if srv != nil {
		w.servers = append(w.servers, srv)
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		serve(l)
	}()
}

// take makes c one of the worker's connections. A container's is counted
// in Accepted and Open and bounded by MaxConns: over it, or once the
// worker is closed, c is closed and take reports false.
func (w *worker) take(c net.Conn, kind connKind) bool {
	if kind == clientConn {
		w.stats.accepted.Add(1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || kind == clientConn && w.stats.open.Load() >= int64(w.maxConns) {
		if !w.closed {
			w.stats.refused.Add(1)
			w.refusals.add(Refusal{Socket: filepath.Base(c.LocalAddr().String()), Tool: protocol.RefusedToolConnections,
				Code: protocol.RefusedConnectionCap, Reason: fmt.Sprintf("over the worker's %d connections at once (GATEWAY_MAX_CONNS)", w.maxConns)})
		}
		c.Close()
		return false
	}
	w.conns[c] = struct{}{}
	if kind == clientConn {
		w.stats.open.Add(1)
	}
	w.wg.Add(1)
	return true
}

// drop forgets c, which its user closed.
func (w *worker) drop(c net.Conn, kind connKind) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.conns[c]; ok {
		delete(w.conns, c)
		if kind == clientConn {
			w.stats.open.Add(-1)
		}
		w.wg.Done()
	}
}

// close closes the worker's listeners and open connections and cancels
// its dials; wait waits for their goroutines.
func (w *worker) close() {
	w.cancel()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	for _, l := range w.listeners {
		l.Close()
	}
	for c := range w.conns {
		c.Close()
	}
	servers := w.servers
	w.mu.Unlock()
	// Outside w.mu: the servers' connections leave w.conns as they close.
	for _, s := range servers {
		s.close()
	}
}

func (w *worker) wait(ctx context.Context) error {
	if err := waitGroup(ctx, &w.wg); err != nil {
		return fmt.Errorf("gateway: worker %s: connections still closing: %w", w.ID(), err)
	}
	return nil
}

// idHandler writes worker_id, read at each line, then the attributes
// given to the logger (With), then the line's own, through h.
type idHandler struct {
	h     slog.Handler
	w     *worker
	attrs []slog.Attr
}

func (i idHandler) Enabled(ctx context.Context, l slog.Level) bool { return i.h.Enabled(ctx, l) }

func (i idHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(slog.String("worker_id", i.w.ID()))
	out.AddAttrs(i.attrs...)
	r.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	return i.h.Handle(ctx, out)
}

func (i idHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return idHandler{h: i.h, w: i.w, attrs: append(slices.Clip(i.attrs), as...)}
}

// WithGroup writes the attributes given so far before worker_id: a group
// holds what follows.
func (i idHandler) WithGroup(name string) slog.Handler {
	return idHandler{h: i.h.WithAttrs(i.attrs).WithGroup(name), w: i.w}
}
