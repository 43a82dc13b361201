// Package rdb owns every Redis call the wrapper makes. Key names come from
// protocol.Keys; every call has its own timeout.
package rdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// SetLogger sends go-redis's own messages (a failed dial while Redis is
// down, say) to log at debug level, as JSON like every other line, instead
// of its default plain-text logger on stderr.
func SetLogger(log *slog.Logger) { redis.SetLogger(slogAdapter{log}) }

type slogAdapter struct{ log *slog.Logger }

func (a slogAdapter) Printf(ctx context.Context, format string, v ...any) {
	a.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// RDB is the wrapper's view of Redis.
type RDB struct {
	c       *redis.Client
	reader  *redis.Client // its own connection for blocking reads, closed to end one at once
	Keys    protocol.Keys
	Timeout time.Duration // per call; blocking reads add their block time
}

// Open parses a redis:// or rediss:// URL (with password) and returns an
// RDB. It does not connect: the wrapper starts even when Redis is down.
func Open(url string, keys protocol.Keys) (*RDB, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("rdb: REDIS_URL: %w", err)
	}
	opt.MaxRetries = -1 // the wrapper retries with its own backoff, and knows what is idempotent
	opt.DialTimeout = 2 * time.Second
	opt.ReadTimeout = 3 * time.Second
	opt.WriteTimeout = 3 * time.Second
	opt.PoolSize = 4
	opt.ContextTimeoutEnabled = true
	ropt := *opt
	ropt.PoolSize, ropt.MinIdleConns = 1, 0
	return &RDB{c: redis.NewClient(opt), reader: redis.NewClient(&ropt), Keys: keys, Timeout: 3 * time.Second}, nil
}

// Close closes the connections.
func (r *RDB) Close() error {
	r.reader.Close()
	return r.c.Close()
}

// StopReading ends a blocking ReadTask at once and makes every later one
// fail: go-redis does not watch a context's cancellation while it waits for
// a reply, so shutdown closes the reading connection instead.
func (r *RDB) StopReading() { r.reader.Close() }

func (r *RDB) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, r.Timeout)
}

// Ping checks that Redis answers.
func (r *RDB) Ping(ctx context.Context) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.Ping(ctx).Err()
}

// EnsureGroup creates the consumer group on stream (and the stream) when
// missing. A new group reads from the start of the stream, so that tasks
// added before the first worker started are served.
func (r *RDB) EnsureGroup(ctx context.Context, stream, group string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	err := r.c.XGroupCreateMkStream(ctx, stream, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("rdb: create group %s on %s: %w", group, stream, err)
	}
	return nil
}

// Entry is one stream entry read for this consumer.
type Entry struct {
	ID     string
	Values map[string]any
}

// ReadTask reads one entry of stream through group as consumer. With
// pending, it returns the consumer's own entries that were delivered but
// not acknowledged (nil when none); otherwise it waits up to block for a
// new one (nil when none came).
func (r *RDB) ReadTask(ctx context.Context, stream, group, consumer string, pending bool, block time.Duration) (*Entry, error) {
	id := ">"
	if pending {
		id, block = "0", -1
	}
	args := &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, id}, Count: 1, Block: block}
	tctx, cancel := context.WithTimeout(ctx, r.Timeout+max(block, 0))
	defer cancel()
	res, err := r.reader.XReadGroup(tctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			return nil, ErrNoGroup
		}
		return nil, fmt.Errorf("rdb: read %s: %w", stream, err)
	}
	for _, s := range res {
		for _, m := range s.Messages {
			return &Entry{ID: m.ID, Values: m.Values}, nil
		}
	}
	return nil, nil
}

// IsServerError reports whether err is Redis refusing a command (an error
// reply such as WRONGTYPE), not a connection that failed.
func IsServerError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	// Replies of a server that is starting, busy or failing over pass.
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "READONLY", "CLUSTERDOWN"} {
		if strings.HasPrefix(re.Error(), p) {
			return false
		}
	}
	return true
}

// ErrNoGroup: the consumer group (or its stream) was deleted under us.
var ErrNoGroup = errors.New("rdb: consumer group is missing")

// Ack acknowledges an entry.
func (r *RDB) Ack(ctx context.Context, stream, group, id string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.XAck(ctx, stream, group, id).Err()
}

// DeliveryCount returns how many times the entry has been delivered (1 for
// the first), or 0 when it is not pending.
func (r *RDB) DeliveryCount(ctx context.Context, stream, group, id string) (int64, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	res, err := r.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: id, End: id, Count: 1}).Result()
	if err != nil || len(res) == 0 {
		return 0, err
	}
	return res[0].RetryCount, nil
}

// RunState returns the state of a run, or "" when the run is unknown.
func (r *RDB) RunState(ctx context.Context, requestID string) (protocol.RunState, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	s, err := r.c.HGet(ctx, r.Keys.Run(requestID), protocol.RunFieldStatus).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return protocol.RunState(s), err
}

// HSet sets fields of a hash.
func (r *RDB) HSet(ctx context.Context, key string, fields map[string]any) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.HSet(ctx, key, fields).Err()
}

// XAdd appends a protocol document to a stream.
func (r *RDB) XAdd(ctx context.Context, stream string, doc []byte) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err()
}

// SetEx sets a key with a TTL.
func (r *RDB) SetEx(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.Set(ctx, key, value, ttl).Err()
}

// Del deletes keys.
func (r *RDB) Del(ctx context.Context, keys ...string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.Del(ctx, keys...).Err()
}

// finishScript publishes a task's output, marks its run terminal and
// acknowledges its entry, atomically, unless the run is already terminal
// (then it only acknowledges). Running it twice publishes once.
//
// KEYS[1] run hash, KEYS[2] output stream, KEYS[3] input stream
// ARGV[1] group, ARGV[2] entry id ("" for none), ARGV[3] output document,
// ARGV[4...] run hash field/value pairs
var finishScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
local published = 0
if st ~= 'completed' and st ~= 'failed' then
  redis.call('XADD', KEYS[2], '*', 'data', ARGV[3])
  if #ARGV > 3 then
    redis.call('HSET', KEYS[1], unpack(ARGV, 4))
  end
  published = 1
end
if ARGV[2] ~= '' then
  redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
end
return published
`)

// Finish is what FinishTask stores.
type Finish struct {
	RequestID    string
	OutputStream string
	Output       []byte
	Run          map[string]any // run hash fields, with the terminal status
	InputStream  string
	Group        string
	EntryID      string // "" when there is no entry to acknowledge
}

// FinishTask runs the finish script: it returns true when it published the
// output, false when the run was already terminal.
func (r *RDB) FinishTask(ctx context.Context, f Finish) (bool, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	args := []any{f.Group, f.EntryID, string(f.Output)}
	for k, v := range f.Run {
		args = append(args, k, v)
	}
	n, err := finishScript.Run(ctx, r.c, []string{r.Keys.Run(f.RequestID), f.OutputStream, f.InputStream}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("rdb: finish task %s: %w", f.RequestID, err)
	}
	return n == 1, nil
}
