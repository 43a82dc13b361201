package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// A lookup of the primary: every sentinel asked at once, their answers
// weighed by configuration epoch and by vote.

// sentinelClient speaks to the sentinels of one master: it asks them for
// the primary, and dials one for a subscription. It holds no state
// between calls; what they learn is the sentinels follower's.
type sentinelClient struct {
	u       protocol.RedisURL
	tls     *tls.Config // nil: plain TCP to the sentinels
	timeout time.Duration
}

// ask asks every sentinel at once for the primary's address: at once
// when a majority of all the sentinels agree and none named another under
// a newer epoch, else the one protocol.NewestPrimary chooses once every
// one answered or failed (none while a sentinel is failing the master
// over).
func (sc *sentinelClient) ask(ctx context.Context) (string, error) {
	type answer struct {
		n   protocol.SentinelAnswer
		err error
	}
	ch := make(chan answer, len(sc.u.Addrs))
	for _, a := range sc.u.Addrs {
		go func() {
			n, err := sc.askOne(ctx, a)
			ch <- answer{n, err}
		}()
	}
	var answers []protocol.SentinelAnswer
	votes := map[protocol.SentinelAnswer]int{}
	var newest int64 // the newest epoch heard: a majority under an older one is out of date
	var lastErr error
	for range sc.u.Addrs {
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
		if votes[r.n] > len(sc.u.Addrs)/2 && r.n.Epoch == newest {
			return r.n.Addr, nil
		}
	}
	if len(answers) == 0 && lastErr != nil {
		return "", fmt.Errorf("gateway: no sentinel of %s answered: %w", sc.u.Master, lastErr)
	}
	addr, err := protocol.NewestPrimary(answers)
	if err != nil {
		return "", fmt.Errorf("gateway: the primary of %s: %w", sc.u.Master, err)
	}
	return addr, nil
}

// askOne asks the sentinel at addr for the primary: SENTINEL MASTER, or
// for a sentinel user not allowed it, SENTINEL GET-MASTER-ADDR-BY-NAME.
func (sc *sentinelClient) askOne(ctx context.Context, addr string) (protocol.SentinelAnswer, error) {
	c, err := sc.dial(ctx, addr)
	if err != nil {
		return protocol.SentinelAnswer{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := c.send("SENTINEL", "MASTER", sc.u.Master); err != nil {
		return protocol.SentinelAnswer{}, err
	}
	r, err := c.read()
	if _, ok := errors.AsType[replyError](err); ok {
		// An error reply: NOPERM (a sentinel user allowed the address
		// alone), or a master it does not know, of which the question
		// for the address alone says as much (no answer).
		return sc.askAddr(c, addr)
	}
	if err != nil {
		return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s: %w", addr, err)
	}
	return sc.masterAnswer(addr, r)
}

// masterAnswer reads the answer to SENTINEL MASTER: a flat list of
// field names and values.
func (sc *sentinelClient) masterAnswer(addr string, r []string) (protocol.SentinelAnswer, error) {
	f := map[string]string{}
	for i := 0; i+1 < len(r); i += 2 {
		f[r[i]] = r[i+1]
	}
	if f["ip"] == "" || f["port"] == "" {
		return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s knows no master %s", addr, sc.u.Master)
	}
	epoch, _ := strconv.ParseInt(f["config-epoch"], 10, 64)
	return protocol.SentinelAnswer{Addr: net.JoinHostPort(f["ip"], f["port"]), Epoch: epoch,
		Failing: slices.Contains(strings.Split(f["flags"], ","), "failover_in_progress")}, nil
}

// askAddr asks the sentinel on c for the primary's address alone
// (SENTINEL GET-MASTER-ADDR-BY-NAME), which tells no epoch.
func (sc *sentinelClient) askAddr(c *respConn, addr string) (protocol.SentinelAnswer, error) {
	if err := c.send("SENTINEL", "GET-MASTER-ADDR-BY-NAME", sc.u.Master); err != nil {
		return protocol.SentinelAnswer{}, err
	}
	r, err := c.read()
	if err != nil {
		return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s: %w", addr, err)
	}
	if len(r) != 2 || r[0] == "" || r[1] == "" {
		return protocol.SentinelAnswer{}, fmt.Errorf("gateway: sentinel %s knows no master %s", addr, sc.u.Master)
	}
	return protocol.SentinelAnswer{Addr: net.JoinHostPort(r[0], r[1])}, nil
}

// dial connects to the sentinel at addr (TLS for rediss+sentinel) and
// authenticates with the sentinels' credentials. The connection is closed
// when ctx is done, whatever it waits for.
func (sc *sentinelClient) dial(ctx context.Context, addr string) (*respConn, error) {
	d := net.Dialer{Timeout: sc.timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: sentinel %s: %w", addr, err)
	}
	if sc.tls != nil {
		cfg := sc.tls.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		hctx, cancel := context.WithTimeout(ctx, sc.timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("gateway: sentinel %s: TLS: %w", addr, err)
		}
		nc = tc
	}
	c := newRespConn(ctx, nc)
	if sc.u.SentinelPassword != "" {
		_ = c.SetDeadline(time.Now().Add(sc.timeout))
		args := []string{"AUTH", sc.u.SentinelPassword}
		if sc.u.SentinelUsername != "" {
			args = []string{"AUTH", sc.u.SentinelUsername, sc.u.SentinelPassword}
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
