package gateway

// Following a Sentinel primary. When Config.Redis is a sentinel URL, each
// connection to a worker's redis.sock is relayed to the server the
// sentinels name as the primary now, and a new primary closes every
// relayed connection to another one, so that the wrappers reconnect
// through the same socket and reach it.
//
// Between a replica's promotion and the sentinels' +switch-master (about
// a second), the old primary still takes writes and drops them when it is
// demoted. The leading sentinel announces that it starts choosing the
// replica (+failover-state-select-slave) a sentinel tick or two before it
// promotes one: from then the gateway fences the primary, closing every
// relayed connection to it and holding new ones, until a sentinel names
// the new primary, the leader aborts, or FenceFor passes.
//
// The gateway speaks the few commands it needs (AUTH, SENTINEL MASTER,
// SENTINEL GET-MASTER-ADDR-BY-NAME, SUBSCRIBE) in plain RESP (resp.go)
// rather than through go-redis: it needs a vote of several sentinels per
// lookup and one subscription per sentinel, which go-redis's failover
// client does not give (it trusts the first sentinel that answers), and
// it keeps the data plane's binary on the standard library and the
// project's own protocol. The lookups are in sentinel_ask.go, the
// subscriptions in sentinel_watch.go; this file holds what they learn.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// PrimaryCacheFor is how long the primary the sentinels named serves new
// connections before they are asked again. A +switch-master announcement
// replaces it at once.
const PrimaryCacheFor = time.Second

// FenceFor bounds how long a failover under way holds new connections:
// after it, the sentinels are asked again (a failover that takes longer
// may let a write reach the old primary, as without a fence).
const FenceFor = 5 * time.Second

// The sentinels' channels the gateway follows: the new primary, the start
// of a failover's choice of replica, and the ends of one that failed
// before it promoted any.
const (
	chanSwitch      = "+switch-master"
	chanSelectSlave = "+failover-state-select-slave"
	chanNoGoodSlave = "-failover-abort-no-good-slave"
	chanSlaveTimout = "-failover-abort-slave-timeout"
)

// ParseRedis checks a Config.Redis: host:port, or a sentinel URL
// (redis+sentinel:// or rediss+sentinel://) of which the gateway uses the
// sentinels' addresses, the master's name and the sentinels' credentials.
// A sentinel URL that carries the data user's credentials is refused: the
// gateway relays bytes and never authenticates to the primary, so it must
// not hold them. It returns the parsed URL, or nil for host:port.
func ParseRedis(s string) (*protocol.RedisURL, error) {
	if !strings.Contains(s, "://") {
		host, port, err := net.SplitHostPort(s)
		if err != nil || host == "" || port == "" || strings.ContainsAny(s, "/ @") {
			got := fmt.Sprintf("%q", s)
			if strings.Contains(s, "@") {
				got = "an address with an @ (credentials?)" // never quoted: it may hold a password
			}
			return nil, fmt.Errorf("gateway: Redis: want host:port or a redis+sentinel:// URL, got %s", got)
		}
		return nil, nil
	}
	u, err := protocol.ParseRedisURL(s)
	if err != nil {
		return nil, fmt.Errorf("gateway: Redis: %w", err)
	}
	if !u.Sentinel {
		return nil, fmt.Errorf("gateway: Redis: a %s:// URL: want host:port, or a redis+sentinel:// URL (the wrapper speaks TLS and AUTH end to end)", u.Scheme())
	}
	if u.Username != "" || u.Password != "" {
		return nil, errors.New("gateway: Redis: the sentinel URL carries the data user's credentials, which the gateway must not hold: give only the sentinels' (sentinel_username, sentinel_password)")
	}
	return &u, nil
}

// sentinels finds the primary of one master through its sentinels and
// follows it: a lookup asks them all, and a subscription on each to
// +switch-master learns of a new primary at once.
//
// It is the relay's redisUpstream when Config.Redis is a sentinel URL.
type sentinels struct {
	client   sentinelClient
	master   string // the master's name, for logs
	log      *slog.Logger
	onSwitch func() // called, outside mu, after gen moved on
	// life bounds the lookups, which no one caller owns (they are
	// shared): the gateway's, done at Stop.
	life context.Context

	// gen counts the primaries seen: it moves on with each new one, and a
	// relayed connection dialled under an older gen is closed.
	gen atomic.Uint64

	mu       sync.Mutex
	addr     string    // the primary last named; "" before the first
	at       time.Time // when addr was last confirmed
	inTheAir *lookup   // the lookup under way, shared by every caller
	fence    *fence    // a failover under way: new connections wait
	// news counts what the sentinels announced (a switch, a fence, its
	// end): a lookup asked before news came does not overwrite it.
	news uint64
}

// fence is a failover under way, announced by the sentinel by.
type fence struct {
	by     string
	lifted chan struct{}
	timer  *time.Timer
}

// lookup is one round of questions to the sentinels, its answer shared by
// the connections that wait for it.
type lookup struct {
	done   chan struct{}
	addr   string
	err    error
	stored bool   // its answer became the primary
	gen    uint64 // the gen it was stored under
}

// sentinelParams are what the sentinel follower is built from.
type sentinelParams struct {
	url     protocol.RedisURL
	tls     *tls.Config // nil: the system's roots, for rediss+sentinel
	timeout time.Duration
	log     *slog.Logger
	// onSwitch is called when the primary in force changes (or is
	// fenced): the relay closes its connections to the old one.
	onSwitch func()
}

// newSentinels follows p.url's master; life bounds its lookups (and
// watch, which subscribes to the sentinels, is given its own).
func newSentinels(life context.Context, p sentinelParams) *sentinels {
	tlsConfig := p.tls
	if p.url.TLS && tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if !p.url.TLS {
		tlsConfig = nil
	}
	return &sentinels{client: sentinelClient{u: p.url, tls: tlsConfig, timeout: p.timeout}, master: p.url.Master,
		log: p.log, onSwitch: p.onSwitch, life: life}
}

// generation is the generation of the primary in force.
func (s *sentinels) generation() uint64 { return s.gen.Load() }

var _ redisUpstream = (*sentinels)(nil)

// primary returns the primary's address and the gen it belongs to: the
// cached one when it is fresh, else the sentinels' answer now. While a
// failover is fenced it waits; a lookup overtaken by news (a fence, a
// switch) is not taken: it starts over.
func (s *sentinels) primary(ctx context.Context) (string, uint64, error) {
	s.mu.Lock()
	for {
		if f := s.fence; f != nil {
			s.mu.Unlock()
			select {
			case <-f.lifted:
			case <-ctx.Done():
				return "", 0, ctx.Err()
			}
			s.mu.Lock()
			continue
		}
		if s.addr != "" && time.Since(s.at) < PrimaryCacheFor {
			addr, gen := s.addr, s.gen.Load()
			s.mu.Unlock()
			return addr, gen, nil
		}
		l := s.inTheAir
		if l == nil {
			l = &lookup{done: make(chan struct{})}
			s.inTheAir = l
			go s.run(l, s.news)
		}
		s.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return "", 0, ctx.Err()
		}
		if l.err != nil {
			return "", 0, l.err
		}
		s.mu.Lock()
		if l.stored && s.fence == nil && s.gen.Load() == l.gen {
			s.mu.Unlock()
			return l.addr, l.gen, nil
		}
	}
}

// run asks the sentinels for l and stores their answer, unless news came
// meanwhile (a switch names a newer primary than they were asked; a
// fence holds every connection).
func (s *sentinels) run(l *lookup, news uint64) {
	ctx, cancel := context.WithTimeout(s.life, 2*s.client.timeout)
	defer cancel()
	addr, err := s.client.ask(ctx)
	s.mu.Lock()
	s.inTheAir = nil
	moved := false
	l.addr, l.err = addr, err
	if err == nil && s.news == news {
		before := s.gen.Load()
		s.setLocked(addr)
		l.stored, l.gen = true, s.gen.Load()
		moved = l.gen != before // the sentinels name a new primary: a switch not announced to us
	}
	s.mu.Unlock()
	close(l.done)
	if moved && s.onSwitch != nil {
		s.onSwitch()
	}
}

// setLocked makes addr the primary (s.mu held), moving gen on when it is
// a new one.
func (s *sentinels) setLocked(addr string) {
	if s.addr != "" && s.addr != addr {
		s.gen.Add(1)
		s.log.Info("redis primary changed", "master", s.master, "old", s.addr, "new", addr)
	} else if s.addr == "" {
		s.log.Info("redis primary found", "master", s.master, "addr", addr)
	}
	s.addr, s.at = addr, time.Now()
}

// switchTo is a +switch-master announcement of addr: it becomes the
// primary at once, and the connections to another one are closed.
func (s *sentinels) switchTo(addr string) {
	s.mu.Lock()
	before := s.gen.Load()
	s.setLocked(addr)
	moved := s.gen.Load() != before
	s.news++
	s.liftLocked(s.fence, "new primary named", false)
	s.mu.Unlock()
	if moved && s.onSwitch != nil {
		s.onSwitch()
	}
}

// fenceFrom is the sentinel at by starting a failover: the connections to
// the primary are closed and new ones wait, until a sentinel names the
// new primary, by aborts, or FenceFor passes.
func (s *sentinels) fenceFrom(by string) {
	s.mu.Lock()
	s.news++
	if f := s.fence; f != nil {
		// Another sentinel's failover (the first one's end not heard):
		// it is the one to wait for now.
		if f.by != by {
			f.by = by
			f.timer.Reset(FenceFor)
		}
		s.mu.Unlock()
		return
	}
	f := &fence{by: by, lifted: make(chan struct{})}
	f.timer = time.AfterFunc(FenceFor, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.liftLocked(f, "no new primary named within "+FenceFor.String(), true)
	})
	s.fence = f
	s.gen.Add(1) // every connection dialled before is to the old primary
	s.at = time.Time{}
	s.mu.Unlock()
	s.log.Info("redis failover under way: connections to the primary closed, new ones held", "master", s.master, "sentinel", by)
	if s.onSwitch != nil {
		s.onSwitch()
	}
}

// abortFrom is the sentinel at by giving up a failover before it promoted
// a replica: its fence, if it set one, is lifted.
func (s *sentinels) abortFrom(by string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fence != nil && s.fence.by == by {
		s.liftLocked(s.fence, "failover aborted", true)
	}
}

// liftLocked ends fence f if it is the current one (s.mu held): held
// connections go on, to the primary just announced, or when ask, to the
// one the sentinels name now.
func (s *sentinels) liftLocked(f *fence, why string, ask bool) {
	if f == nil || s.fence != f {
		return
	}
	s.fence = nil
	s.news++
	f.timer.Stop()
	close(f.lifted)
	if ask {
		s.at = time.Time{}
	}
	s.log.Info("redis failover fence lifted", "master", s.master, "why", why)
}

// forget drops the cached primary (it refused a dial): the next
// connection asks the sentinels.
func (s *sentinels) forget(addr string) {
	s.mu.Lock()
	if s.addr == addr {
		s.at = time.Time{}
	}
	s.mu.Unlock()
}

// forgetAll drops the cached primary, whichever it is.
func (s *sentinels) forgetAll() {
	s.mu.Lock()
	s.at = time.Time{}
	s.mu.Unlock()
}
