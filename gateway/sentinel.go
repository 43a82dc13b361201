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
// The gateway speaks the few commands it needs (AUTH, SENTINEL
// GET-MASTER-ADDR-BY-NAME, SUBSCRIBE) in plain RESP rather than through
// go-redis: it needs a vote of several sentinels per lookup and one
// subscription per sentinel, which go-redis's failover client does not
// give (it trusts the first sentinel that answers), and it keeps the data
// plane's binary on the standard library.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
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
type sentinels struct {
	u        protocol.RedisURL
	tls      *tls.Config // nil: plain TCP to the sentinels
	timeout  time.Duration
	log      *slog.Logger
	onSwitch func() // called, outside mu, after gen moved on

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

func newSentinels(u protocol.RedisURL, tlsConfig *tls.Config, timeout time.Duration, log *slog.Logger, onSwitch func()) *sentinels {
	if u.TLS && tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if !u.TLS {
		tlsConfig = nil
	}
	return &sentinels{u: u, tls: tlsConfig, timeout: timeout, log: log, onSwitch: onSwitch}
}

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
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.timeout)
	defer cancel()
	addr, err := s.ask(ctx)
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
		s.log.Info("redis primary changed", "master", s.u.Master, "old", s.addr, "new", addr)
	} else if s.addr == "" {
		s.log.Info("redis primary found", "master", s.u.Master, "addr", addr)
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
	s.log.Info("redis failover under way: connections to the primary closed, new ones held", "master", s.u.Master, "sentinel", by)
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
	s.log.Info("redis failover fence lifted", "master", s.u.Master, "why", why)
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

// ask asks every sentinel at once for the primary's address: at once
// when a majority of all the sentinels agree and none named another under
// a newer epoch, else the one protocol.NewestPrimary chooses once every
// one answered or failed (none while a sentinel is failing the master
// over).
func (s *sentinels) ask(ctx context.Context) (string, error) {
	type answer struct {
		n   protocol.SentinelAnswer
		err error
	}
	ch := make(chan answer, len(s.u.Addrs))
	for _, a := range s.u.Addrs {
		go func() {
			n, err := s.askOne(ctx, a)
			ch <- answer{n, err}
		}()
	}
	var answers []protocol.SentinelAnswer
	votes := map[protocol.SentinelAnswer]int{}
	var newest int64 // the newest epoch heard: a majority under an older one is out of date
	var lastErr error
	for range s.u.Addrs {
		r := <-ch
		if r.err != nil {
			lastErr = r.err
			continue
		}
		answers = append(answers, r.n)
		if r.n.Failing {
			break // NewestPrimary names none
		}
		votes[r.n]++
		newest = max(newest, r.n.Epoch)
		if votes[r.n] > len(s.u.Addrs)/2 && r.n.Epoch == newest {
			return r.n.Addr, nil
		}
	}
	if len(answers) == 0 && lastErr != nil {
		return "", fmt.Errorf("gateway: no sentinel of %s answered: %w", s.u.Master, lastErr)
	}
	addr, err := protocol.NewestPrimary(answers)
	if err != nil {
		return "", fmt.Errorf("gateway: the primary of %s: %w", s.u.Master, err)
	}
	return addr, nil
}

// askOne asks the sentinel at addr for the primary: SENTINEL MASTER, or
// for a sentinel user not allowed it, SENTINEL GET-MASTER-ADDR-BY-NAME.
func (s *sentinels) askOne(ctx context.Context, addr string) (protocol.SentinelAnswer, error) {
	c, err := s.dial(ctx, addr)
	if err != nil {
		return protocol.SentinelAnswer{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := c.send("SENTINEL", "MASTER", s.u.Master); err != nil {
		return protocol.SentinelAnswer{}, err
	}
	r, err := c.read()
	var re replyError
	switch {
	case err == nil:
		f := map[string]string{}
		for i := 0; i+1 < len(r); i += 2 {
			f[r[i]] = r[i+1]
		}
		if f["ip"] == "" || f["port"] == "" {
			return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s knows no master %s", addr, s.u.Master)
		}
		epoch, _ := strconv.ParseInt(f["config-epoch"], 10, 64)
		return protocol.SentinelAnswer{Addr: net.JoinHostPort(f["ip"], f["port"]), Epoch: epoch,
			Failing: strings.Contains(f["flags"], "failover_in_progress")}, nil
	case !errors.As(err, &re):
		return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s: %w", addr, err)
	case strings.HasPrefix(string(re), "ERR No such master"):
		return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s knows no master %s", addr, s.u.Master)
	}
	// An error reply (NOPERM: the sentinel user may ask for the address
	// alone).
	if err := c.send("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.u.Master); err != nil {
		return protocol.SentinelAnswer{}, err
	}
	r, err = c.read()
	if err != nil {
		return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s: %w", addr, err)
	}
	if len(r) != 2 || r[0] == "" || r[1] == "" {
		return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s knows no master %s", addr, s.u.Master)
	}
	return protocol.SentinelAnswer{Addr: net.JoinHostPort(r[0], r[1])}, nil
}

// dial connects to the sentinel at addr (TLS for rediss+sentinel) and
// authenticates with the sentinels' credentials.
func (s *sentinels) dial(ctx context.Context, addr string) (*respConn, error) {
	d := net.Dialer{Timeout: s.timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: sentinel %s: %w", addr, err)
	}
	if s.tls != nil {
		cfg := s.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		hctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("gateway: sentinel %s: TLS: %w", addr, err)
		}
		nc = tc
	}
	c := &respConn{Conn: nc, r: bufio.NewReader(nc)}
	if s.u.SentinelPassword != "" {
		_ = c.SetDeadline(time.Now().Add(s.timeout))
		args := []string{"AUTH", s.u.SentinelPassword}
		if s.u.SentinelUsername != "" {
			args = []string{"AUTH", s.u.SentinelUsername, s.u.SentinelPassword}
		}
		if err := c.send(args...); err == nil {
			_, err = c.read()
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("gateway: sentinel %s: AUTH: %w", addr, err)
		}
		_ = c.SetDeadline(time.Time{})
	}
	return c, nil
}

// watch keeps a subscription to +switch-master on every sentinel until
// ctx ends, each dialled again after a pause when it drops.
func (s *sentinels) watch(ctx context.Context, wg *sync.WaitGroup) {
	for _, a := range s.u.Addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			back := 100 * time.Millisecond
			for ctx.Err() == nil {
				if s.subscribe(ctx, a) {
					back = 100 * time.Millisecond
				}
				select {
				case <-ctx.Done():
				case <-time.After(back):
				}
				back = min(2*back, 5*time.Second)
			}
		}()
	}
}

// subscribe subscribes to the sentinel at addr's failover channels and
// follows what it announces until the connection or ctx ends. It reports
// whether the subscription was made. Once subscribed it asks the
// sentinels again: a switch announced while it was away is not missed.
func (s *sentinels) subscribe(ctx context.Context, addr string) bool {
	c, err := s.dial(ctx, addr)
	if err != nil {
		s.log.Debug("sentinel subscription", "sentinel", addr, "err", err)
		return false
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(s.timeout))
	channels := []string{chanSwitch, chanSelectSlave, chanNoGoodSlave, chanSlaveTimout}
	if err := c.send(append([]string{"SUBSCRIBE"}, channels...)...); err != nil {
		return false
	}
	for range channels {
		if _, err := c.read(); err != nil {
			s.log.Debug("sentinel subscription", "sentinel", addr, "err", err)
			return false
		}
	}
	_ = c.SetDeadline(time.Time{})
	s.forgetAll()
	for {
		m, err := c.read()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sentinel subscription lost: subscribing again", "sentinel", addr, "err", err)
			}
			return true
		}
		if len(m) != 3 || m[0] != "message" {
			continue
		}
		f := strings.Fields(m[2])
		switch m[1] {
		case chanSwitch: // "<master> <old ip> <old port> <new ip> <new port>"
			if len(f) == 5 && f[0] == s.u.Master {
				s.switchTo(net.JoinHostPort(f[3], f[4]))
			}
		case chanSelectSlave, chanNoGoodSlave, chanSlaveTimout: // "master <master> <ip> <port>"
			if len(f) != 4 || f[0] != "master" || f[1] != s.u.Master {
				continue
			}
			if m[1] == chanSelectSlave {
				s.fenceFrom(addr)
			} else {
				s.abortFrom(addr)
			}
		}
	}
}

// forgetAll drops the cached primary, whichever it is.
func (s *sentinels) forgetAll() {
	s.mu.Lock()
	s.at = time.Time{}
	s.mu.Unlock()
}

// replyError is an error reply of the server.
type replyError string

func (e replyError) Error() string { return "redis: " + string(e) }

// respConn is a connection speaking RESP2: commands out as arrays of bulk
// strings, replies in flattened to strings.
type respConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *respConn) send(words ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(words))
	for _, w := range words {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(w), w)
	}
	_, err := io.WriteString(c.Conn, b.String())
	return err
}

// maxReply bounds what one reply may hold: a sentinel's answers are a few
// short strings.
const maxReply = 64 << 10

// read reads one reply: a string or integer as one element, an array's
// elements (nested arrays flattened), a nil as "". An error reply is an
// error.
func (c *respConn) read() ([]string, error) {
	var out []string
	err := c.readInto(&out, 0)
	return out, err
}

func (c *respConn) readInto(out *[]string, depth int) error {
	if depth > 4 {
		return errors.New("redis reply nested too deep")
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return errors.New("empty redis reply")
	}
	switch line[0] {
	case '+', ':':
		*out = append(*out, line[1:])
		return nil
	case '-':
		return replyError(printable(line[1:]))
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > maxReply {
			return fmt.Errorf("redis reply %q not understood", printable(line))
		}
		if n < 0 {
			*out = append(*out, "")
			return nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return err
		}
		*out = append(*out, string(b[:n]))
		return nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n > 64 {
			return fmt.Errorf("redis reply %q not understood", printable(line))
		}
		for range max(n, 0) {
			if err := c.readInto(out, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("redis reply %q not understood", printable(line))
}
