package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"
)

// The Redis relay: every connection to a worker's redis.sock is relayed,
// byte for byte, to the upstream Redis over TCP. The wrapper speaks Redis
// (or TLS) end to end through it, and logs in itself: the gateway reads
// none of it and holds no password of the data.

// redisUpstream names the Redis server a new connection is relayed to:
// one address (Config.Redis as host:port), or the primary the sentinels
// name now (sentinels).
type redisUpstream interface {
	// primary returns the address to dial and the generation of the
	// primary it is: a connection dialled under an older generation is to
	// a primary no longer in force.
	primary(ctx context.Context) (addr string, gen uint64, err error)
	// generation is the generation of the primary in force.
	generation() uint64
	// forget is told that addr refused a dial.
	forget(addr string)
}

// fixedRedis is Config.Redis as host:port: always the one server.
type fixedRedis string

func (f fixedRedis) primary(context.Context) (string, uint64, error) { return string(f), 0, nil }
func (fixedRedis) generation() uint64                                { return 0 }
func (fixedRedis) forget(string)                                     {}

// redisRelay serves every worker's redis.sock. It owns the set of
// upstream connections of all workers, so that a new primary closes
// every connection to the old one at once (closeOld).
type redisRelay struct {
	upstream    redisUpstream
	name        string // Config.Redis as logs show it: never the sentinels' password
	dialTimeout time.Duration
	log         *slog.Logger

	mu  sync.Mutex
	ups map[net.Conn]uint64 // each upstream connection, with the generation of the primary it was dialled to
}

// redisParams are what the relay is built from.
type redisParams struct {
	upstream    redisUpstream
	name        string
	dialTimeout time.Duration
	log         *slog.Logger
}

func newRedisRelay(p redisParams) *redisRelay {
	return &redisRelay{upstream: p.upstream, name: p.name, dialTimeout: p.dialTimeout, log: p.log, ups: map[net.Conn]uint64{}}
}

// serve accepts the connections of one worker's redis.sock on l, and
// relays each, until the worker is closed. A panic in the accept loop is
// logged and the loop started again.
func (r *redisRelay) serve(side workerSide, l *unixListener) {
	for !r.acceptLoop(side, l) {
		if !pause(side.ctx, 10*time.Millisecond) {
			return
		}
	}
}

// acceptLoop accepts connections on l until it is closed (true), or a
// panic ends it (false, after logging it).
func (r *redisRelay) acceptLoop(side workerSide, l *unixListener) (ended bool) {
	defer func() {
		if p := recover(); p != nil {
			side.log.Error("accept loop panicked", "panic", p, "stack", string(debug.Stack()))
			ended = side.ctx.Err() != nil
		}
	}()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if side.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return true
			}
			// Out of descriptors or the like: wait and go on, as the
			// next connection may well be served.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			side.log.Warn("accept", "err", err, "retry_in", backoff)
			if !pause(side.ctx, backoff) {
				return true
			}
			continue
		}
		backoff = 0
		if side.conns.take(c, clientConn) {
			go r.relay(side, c)
		}
	}
}

// relay dials the upstream and copies bytes both ways between c and it
// until both sides are done. Nothing the container sends ends the
// process: a panic here closes this connection only.
func (r *redisRelay) relay(side workerSide, c net.Conn) {
	var up net.Conn
	defer func() {
		if p := recover(); p != nil {
			side.log.Error("relay panicked", "panic", p, "stack", string(debug.Stack()))
		}
		c.Close()
		side.conns.drop(c, clientConn)
		if up != nil {
			up.Close()
			side.conns.drop(up, upstreamConn)
			r.untrack(up)
		}
	}()
	up, gen, ok := r.dial(side)
	if !ok {
		return
	}
	// The upstream is closed with the worker, and when the sentinels name
	// another primary.
	if !side.conns.take(up, upstreamConn) {
		up = nil
		return
	}
	if !r.track(up, gen) {
		return // the deferred cleanup closes it
	}
	relayBoth(c, up, &side.stats.bytesUp, &side.stats.bytesDown, side.log, "relay panicked")
}

// dial connects to the primary in force, and returns the connection and
// the primary's generation; a failure is counted and logged.
func (r *redisRelay) dial(side workerSide) (net.Conn, uint64, bool) {
	addr, gen, err := r.upstream.primary(side.ctx)
	var up net.Conn
	if err != nil {
		addr = r.name // what a failed lookup logs
	} else {
		d := net.Dialer{Timeout: r.dialTimeout}
		if up, err = d.DialContext(side.ctx, "tcp", addr); err != nil {
			r.upstream.forget(addr)
		}
	}
	if err != nil {
		side.stats.dialErrors.Add(1)
		if side.ctx.Err() == nil {
			side.log.Warn("dial upstream", "addr", addr, "err", err)
		}
		return nil, 0, false
	}
	return up, gen, true
}

// track records up as a connection to the primary of gen, or reports
// false when another is in force since: a connection dialled just before
// a switch must not outlive the sweep of closeOld, which takes r.mu after
// the generation moved on.
func (r *redisRelay) track(up net.Conn, gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.upstream.generation() != gen {
		return false
	}
	r.ups[up] = gen
	return true
}

func (r *redisRelay) untrack(up net.Conn) {
	r.mu.Lock()
	delete(r.ups, up)
	r.mu.Unlock()
}

// closeOld closes every relayed connection, of every worker, to a primary
// no longer in force; each relay then closes its container's side, and
// the wrapper connects again through the same socket to the new one.
func (r *redisRelay) closeOld() {
	r.mu.Lock()
	gen := r.upstream.generation()
	n := 0
	for c, g := range r.ups {
		if g != gen {
			c.Close()
			delete(r.ups, c)
			n++
		}
	}
	r.mu.Unlock()
	r.log.Info("redis connections to the old primary closed", "connections", n)
}
