package rdb

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/redisconn"
)

// Conn is the connection itself: whether it answers, and the one use of
// it that is not this package's.
type Conn interface {
	Ping(ctx context.Context) error
	Watcher() *client.Watcher
}

// connCmds implements Conn over the shared connection.
type connCmds struct{ *core }

var _ Conn = (*connCmds)(nil)

// OpenToAnyone reports whether the Redis that opt reaches lets a client
// in without credentials: a fresh connection with no user and no password
// (the sentinels' own credentials kept) answers PING. Then the per-worker
// users change nothing: an agent could connect as the default user and
// read or forge every key. A refusal for want of authentication (NOAUTH,
// WRONGPASS: a requirepass, or the default user off) is false; any other
// failure (Redis unreachable) is an error.
func OpenToAnyone(ctx context.Context, opt *redis.UniversalOptions) (bool, error) {
	o := *opt
	o.Username, o.Password = "", ""
	o.OnConnect = nil
	o.PoolSize, o.MinIdleConns, o.MaxRetries = 1, 0, -1
	c := redisconn.NewClient(&o)
	defer c.Close()
	err := c.Ping(ctx).Err()
	if err == nil {
		return true, nil
	}
	if authRefused(err) {
		return false, nil
	}
	return false, err
}

// authRefused reports whether err is Redis refusing a client that did not
// authenticate (or whose credentials it rejects).
func authRefused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	// A Redis before 6 answers "ERR ... authentication required" (no code
	// of its own); 6 and later NOAUTH or WRONGPASS.
	return redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS") ||
		strings.Contains(strings.ToLower(re.Error()), "authentication required")
}

// Ping checks the connection.
func (r *connCmds) Ping(ctx context.Context) error { return r.c.Ping(ctx).Err() }

// Watcher returns the client module's reader of the lifecycle and output
// streams over this connection. It is the one place the connection is
// shared, on purpose: the metrics count what a client sees of the
// streams, so they read them as a client does (client.Watcher, the
// client module's own Redis layer) rather than through a second reader
// here that could drift from it.
func (r *connCmds) Watcher() *client.Watcher { return &client.Watcher{Redis: r.c, Keys: r.Keys} }
