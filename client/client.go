// Package client is what a service imports to use the runtime: it sends
// commands to the worker-managers (Commands), puts tasks on workers and
// follows them to their output (Tasks), and watches the lifecycle,
// progress and output streams (Watcher). It talks to Redis only, as
// PROTOCOL.md describes, and depends on go-redis and two modules of this
// project alone: protocol, and redisconn for its WAIT-confirmed XADD
// (redisconn itself needs only protocol and go-redis). A consumer
// compiles neither the Docker SDK nor the manager; deps_test.go checks it.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// Error is a failure with a stable code (PROTOCOL.md, "Error codes"): a
// reply that was not ok carries the manager's code, a call that could not
// reach Redis UPSTREAM_UNAVAILABLE, a document that does not validate
// INVALID_TASK or INVALID_COMMAND.
type Error struct {
	Code protocol.Code
	Err  error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf makes an Error of code.
func Errorf(code protocol.Code, format string, args ...any) *Error {
	return &Error{code, fmt.Errorf(format, args...)}
}

// redisError is a failed Redis call, by cause: credentials refused
// (REDIS_AUTH_FAILED, not retryable), a permission the user lacks
// (FORBIDDEN), anything else (refused connection, timeout, a Redis
// loading) UPSTREAM_UNAVAILABLE, its message saying which.
func redisError(err error, format string, args ...any) *Error {
	code := protocol.CodeUpstreamUnavailable
	switch {
	case redis.IsAuthError(err):
		code = protocol.CodeRedisAuth
	case redis.IsPermissionError(err):
		code = protocol.CodeForbidden
	}
	return &Error{code, fmt.Errorf(format+": %w%s", append(args, err, cause(err))...)}
}

// cause names what a network error is, for the message: a refused
// connection and a timeout read alike in go-redis's own text.
func cause(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return " (connection refused: is Redis running at that address?)"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return " (timed out)"
	}
	return ""
}

// IsAuthFailed reports whether err is Redis refusing the credentials.
func IsAuthFailed(err error) bool { return HasCode(err, protocol.CodeRedisAuth) }

// HasCode reports whether err is an Error with code.
func HasCode(err error, code protocol.Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsResourceExhausted reports whether err is a create that found no slot.
func IsResourceExhausted(err error) bool { return HasCode(err, protocol.CodeResourceExhausted) }

// IsNotFound reports whether err names a worker that does not exist.
func IsNotFound(err error) bool { return HasCode(err, protocol.CodeNotFound) }

// IsBusy reports whether err is a pause refused because the worker has a
// task in flight.
func IsBusy(err error) bool { return HasCode(err, protocol.CodeWorkerBusy) }

// streams is the client's use of Redis streams: where a reader starts,
// an entry added (confirmed by WAIT when asked), a blocking read.
type streams struct {
	c    redis.Cmdable
	wait protocol.WaitPolicy
}

// lastID returns the id of a stream's last entry ("0-0" when it has none),
// the point after which a reader sees only what comes next.
func (s streams) lastID(ctx context.Context, stream string) (string, error) {
	msgs, err := s.c.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return "", err
	}
	if len(msgs) == 1 {
		return msgs[0].ID, nil
	}
	return "0-0", nil
}

// send adds a document to a stream, confirmed by WAIT when the policy
// asks: a failover neither loses it nor, as far as a look at the new
// primary can tell, adds it twice (redisconn.XAdd).
func (s streams) send(ctx context.Context, stream string, doc []byte) error {
	_, err := s.add(ctx, stream, doc)
	return err
}

// add is send, returning the entry's id.
func (s streams) add(ctx context.Context, stream string, doc []byte) (string, error) {
	id, err := redisconn.XAdd(ctx, s.c, s.wait, &redis.XAddArgs{Stream: stream, MaxLen: protocol.DefaultStreamMaxLen, Approx: true, Values: protocol.Values(doc)})
	if redisconn.IsNotReplicated(err) {
		return id, nil // on the primary, which has no replica in sync: nothing more to wait for
	}
	return id, err
}

// read reads, after the given ids, the entries of several streams
// (streams then ids, as XREAD takes them), blocking up to block; nil when
// none came.
func (s streams) read(ctx context.Context, streamsThenIDs []string, block time.Duration, count int64) ([]redis.XStream, error) {
	res, err := s.c.XRead(ctx, &redis.XReadArgs{Streams: streamsThenIDs, Block: block, Count: count}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return res, err
}
