// Package rdb owns every Redis call the wrapper makes. Key names come from
// protocol.Keys; every call has its own timeout. One file per command
// family, each opening with the interface its caller in package worker
// takes (go-redis's style): input.go (Input: the consumer group's reads),
// follow.go (Follow: control documents seen outside the group),
// runs.go (Runs: what a task's admission reads), budget.go (Budgets),
// events.go (Events: what the outbox writes), finish.go (Finisher: a
// task's output, stored once), usage.go (Usage), sessions.go (Sessions),
// affinity.go (Affinity: the developer queue's hand-off), heartbeat.go
// (Heartbeats). Each family is its own type over the shared connection;
// *RDB holds one of each.
package rdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// SetLogger sends go-redis's own messages (a failed dial while Redis is
// down, say) to log, as JSON like every other line, instead of its default
// plain-text logger on stderr.
func SetLogger(log *slog.Logger) { redisconn.SetLogger(log) }

// RDB is the wrapper's view of Redis: one value per command family (the
// package comment lists them), over one shared connection (core).
type RDB struct {
	*core
	Input
	Follow
	Runs
	Budgets
	Events
	Finisher
	Usage
	Sessions
	Affinity
	Heartbeats
}

// core is the connection and settings every family's commands share.
type core struct {
	c      *redis.Client
	reader *redis.Client // its own connection for blocking reads, closed to end one at once
	// followOpt are the options of a Follower's client: a copy taken at
	// Open (a client writes to its own while it connects).
	followOpt redis.UniversalOptions
	Keys      protocol.Keys
	Timeout   time.Duration // per call; blocking reads add their block time
	// StreamMaxLen is the approximate MAXLEN of every XADD (0: none).
	StreamMaxLen int64
	// Wait is WAIT's policy for the writes that matter (FinishTask):
	// off (the zero value) without replicas.
	Wait protocol.WaitPolicy
}

func newRDB(k *core) *RDB {
	return &RDB{core: k, Input: &inputCmds{k}, Follow: &followCmds{k}, Runs: &runCmds{k}, Budgets: &budgetCmds{k}, Events: &eventCmds{k},
		Finisher: &finishCmds{k}, Usage: &usageCmds{k}, Sessions: &sessionCmds{k}, Affinity: &affinityCmds{k}, Heartbeats: &heartbeatCmds{k}}
}

// Open parses a Redis URL (redis://, rediss://, or a sentinel URL:
// protocol.ParseRedisURL) and returns an RDB. It does not connect: the
// wrapper starts even when Redis is down. With a sentinel URL every client
// asks the sentinels for the primary, and follows it when it fails over.
//
// socket, when set, is a unix socket every connection goes through (a
// sealed worker's gateway relays it to the server the URL names).
func Open(url, socket string, keys protocol.Keys) (*RDB, error) {
	opt, err := redisconn.Options(url)
	if err != nil {
		return nil, fmt.Errorf("rdb: REDIS_URL: %w", err) // never quotes the URL
	}
	if socket != "" {
		if err := redisconn.ThroughSocket(opt, socket); err != nil {
			return nil, fmt.Errorf("rdb: REDIS_SOCKET: %w", err)
		}
	}
	opt.MaxRetries = -1 // the wrapper retries with its own backoff, and knows what is idempotent
	opt.DialTimeout = 2 * time.Second
	opt.ReadTimeout = 3 * time.Second
	opt.WriteTimeout = 3 * time.Second
	opt.PoolSize = 4
	opt.ContextTimeoutEnabled = true
	ropt := *opt
	ropt.PoolSize, ropt.MinIdleConns = 1, 0
	return newRDB(&core{c: redisconn.NewClient(opt), reader: redisconn.NewClient(&ropt), followOpt: ropt, Keys: keys, Timeout: 3 * time.Second,
		StreamMaxLen: protocol.DefaultStreamMaxLen}), nil
}

// CanLogIn reports, by an error, whether a new connection to the server
// of url (through socket, when set) logs in and answers PING.
func CanLogIn(ctx context.Context, url, socket string) error {
	opt, err := redisconn.Options(url)
	if err != nil {
		return fmt.Errorf("rdb: the URL does not parse") // never quotes the URL
	}
	if socket != "" {
		if err := redisconn.ThroughSocket(opt, socket); err != nil {
			return fmt.Errorf("rdb: REDIS_SOCKET: %w", err)
		}
	}
	opt.PoolSize, opt.MinIdleConns, opt.MaxRetries = 1, 0, -1
	c := redisconn.NewClient(opt)
	defer c.Close()
	return c.Ping(ctx).Err()
}

// Close closes the connections.
func (r *RDB) Close() error {
	r.reader.Close()
	return r.c.Close()
}

func (r *core) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, r.Timeout)
}

// Ping checks that Redis answers.
func (r *RDB) Ping(ctx context.Context) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.Ping(ctx).Err()
}

// Entry is one stream entry read for this consumer.
type Entry struct {
	ID     string
	Values map[string]any
}

// IsServerError reports whether err is Redis refusing a command for good
// (an error reply such as WRONGTYPE, NOPERM, or NOSCRIPT when the script
// cannot be loaded again), not a connection that failed: retrying the same
// call cannot succeed.
func IsServerError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	// Replies of a server that is starting, busy, failing over or out of
	// memory (trimmed streams and expired keys free it) pass, and so does
	// a refused login: a server that restarted, or a replica a failover
	// promoted, lacks this worker's Redis user until its manager makes it
	// again (within a heartbeat interval).
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "OOM", "WRONGPASS", "NOAUTH"} {
		if redis.HasErrorPrefix(re, p) {
			return false
		}
	}
	return true
}

// ErrNoGroup: the consumer group (or its stream) was deleted under us.
var ErrNoGroup = errors.New("rdb: consumer group is missing")
