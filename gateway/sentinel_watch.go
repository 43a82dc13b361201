package gateway

import (
	"context"
	"net"
	"strings"
	"sync"
	"time"
)

// The subscriptions: one to every sentinel's failover channels, for as
// long as the gateway runs, so that a new primary (or a failover under
// way) is known at once rather than at the next lookup.

// watch keeps a subscription to the failover channels of every sentinel
// until ctx ends, and returns when they all have.
func (s *sentinels) watch(ctx context.Context) {
	var wg sync.WaitGroup
	for _, a := range s.client.u.Addrs {
		wg.Go(func() { s.follow(ctx, a) })
	}
	wg.Wait()
}

// follow keeps a subscription to the sentinel at addr until ctx ends,
// dialled again after a pause (longer each time it fails) when it drops.
func (s *sentinels) follow(ctx context.Context, addr string) {
	back := 100 * time.Millisecond
	for ctx.Err() == nil {
		if s.subscribe(ctx, addr) {
			back = 100 * time.Millisecond
		}
		if !pause(ctx, back) {
			return
		}
		back = min(2*back, 5*time.Second)
	}
}

// subscribe subscribes to the sentinel at addr's failover channels and
// follows what it announces until the connection or ctx ends. It reports
// whether the subscription was made. Once subscribed it asks the
// sentinels again: a switch announced while it was away is not missed.
func (s *sentinels) subscribe(ctx context.Context, addr string) bool {
	c, err := s.client.dial(ctx, addr)
	if err != nil {
		s.log.Debug("sentinel subscription", "sentinel", addr, "err", err)
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(s.client.timeout))
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
		s.announced(addr, m)
	}
}

// announced follows one message m of the sentinel at addr's
// subscription: a new primary, a failover's start, or its abort.
func (s *sentinels) announced(addr string, m []string) {
	if len(m) != 3 || m[0] != "message" {
		return
	}
	f := strings.Fields(m[2])
	switch m[1] {
	case chanSwitch: // "<master> <old ip> <old port> <new ip> <new port>"
		if len(f) == 5 && f[0] == s.master {
			s.switchTo(net.JoinHostPort(f[3], f[4]))
		}
	case chanSelectSlave, chanNoGoodSlave, chanSlaveTimout: // "master <master> <ip> <port>"
		if len(f) != 4 || f[0] != "master" || f[1] != s.master {
			return
		}
		if m[1] == chanSelectSlave {
			s.fenceFrom(addr)
		} else {
			s.abortFrom(addr)
		}
	}
}
