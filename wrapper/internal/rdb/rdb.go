// Package rdb owns every Redis call the wrapper makes. Key names come from
// protocol.Keys; every call has its own timeout.
package rdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// SetLogger sends go-redis's own messages (a failed dial while Redis is
// down, say) to log, as JSON like every other line, instead of its default
// plain-text logger on stderr.
func SetLogger(log *slog.Logger) { redisconn.SetLogger(log) }

// RDB is the wrapper's view of Redis.
type RDB struct {
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
	return &RDB{c: redisconn.NewClient(opt), reader: redisconn.NewClient(&ropt), followOpt: ropt, Keys: keys, Timeout: 3 * time.Second,
		StreamMaxLen: protocol.DefaultStreamMaxLen}, nil
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
	rec, err := r.RunRecord(ctx, requestID)
	return rec.State, err
}

// RunRecord is what the wrapper reads of a run hash before it starts a task.
type RunRecord struct {
	State    protocol.RunState // "" when the run is unknown
	Requeues int64             // protocol.RunFieldAttempts: hand-overs by the spawner
	// Attempt is the last attempt a wrapper ran (protocol.RunFieldAttempt;
	// 0 for none): it counts the wrapper's own retries too.
	Attempt int64
}

// RunRecord reads the state of a run and how often the spawner requeued it.
func (r *RDB) RunRecord(ctx context.Context, requestID string) (RunRecord, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	vals, err := r.c.HMGet(ctx, r.Keys.Run(requestID), protocol.RunFieldStatus, protocol.RunFieldAttempts, protocol.RunFieldAttempt).Result()
	if err != nil {
		return RunRecord{}, fmt.Errorf("rdb: read run %s: %w", requestID, err)
	}
	var rec RunRecord
	if s, ok := vals[0].(string); ok {
		rec.State = protocol.RunState(s)
	}
	if s, ok := vals[1].(string); ok {
		rec.Requeues, _ = strconv.ParseInt(s, 10, 64)
	}
	if s, ok := vals[2].(string); ok {
		rec.Attempt, _ = strconv.ParseInt(s, 10, 64)
	}
	return rec, nil
}

// advanceRunScript writes fields of a run hash without ever moving its
// state backward: a terminal run is left alone; a status older than the
// stored one (a requeued task starting again at requested while the hash
// says running) is not written, nor is the creation time of a run that
// exists. The other fields are written.
//
// KEYS[1] run hash; ARGV[1] the status field, ARGV[2] the creation time
// field, ARGV[3...] field/value pairs.
var advanceRunScript = redis.NewScript(`
local order = {requested = 1, queued = 2, running = 3, completed = 4, failed = 4}
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and order[cur] == 4 then return 0 end
local args = {}
for i = 3, #ARGV, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  local keep = true
  if f == ARGV[1] and cur and (order[v] or 0) < (order[cur] or 0) then keep = false end
  if f == ARGV[2] and cur then keep = false end
  if keep then
    args[#args + 1] = f
    args[#args + 1] = v
  end
end
if #args > 0 then redis.call('HSET', KEYS[1], unpack(args)) end
return 1
`)

// AdvanceRun writes fields of a run hash (with its status), never moving
// the run backward nor changing a terminal one.
func (r *RDB) AdvanceRun(ctx context.Context, requestID string, fields map[string]any) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	args := []any{protocol.RunFieldStatus, protocol.RunFieldCreatedAt}
	for k, v := range fields {
		args = append(args, k, v)
	}
	if err := advanceRunScript.Run(ctx, r.c, []string{r.Keys.Run(requestID)}, args...).Err(); err != nil {
		return fmt.Errorf("rdb: update run %s: %w", requestID, err)
	}
	return nil
}

// HSet sets fields of a hash.
func (r *RDB) HSet(ctx context.Context, key string, fields map[string]any) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.HSet(ctx, key, fields).Err()
}

// XAdd appends a protocol document to a stream, trimmed to about
// StreamMaxLen entries.
func (r *RDB) XAdd(ctx context.Context, stream string, doc []byte) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.XAdd(ctx, r.xaddArgs(stream, doc)).Err()
}

func (r *RDB) xaddArgs(stream string, doc []byte) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc), MaxLen: r.StreamMaxLen, Approx: r.StreamMaxLen > 0}
}

// PublishOutput appends an output document to its stream and acknowledges
// the task's entry, in one transaction, without the run hash: the way out
// when Redis refuses the finish script (a run key of the wrong type, say).
// Only the XADD's error counts: an acknowledgement refused (its group
// deleted) leaves the entry pending, and the output is out.
func (r *RDB) PublishOutput(ctx context.Context, stream string, doc []byte, input, group, entryID string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	var add *redis.StringCmd
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		add = p.XAdd(ctx, r.xaddArgs(stream, doc))
		if entryID != "" {
			p.XAck(ctx, input, group, entryID)
		}
		return nil
	})
	if add != nil && add.Err() == nil {
		return nil
	}
	if err == nil {
		err = add.Err()
	}
	return fmt.Errorf("rdb: publish output on %s: %w", stream, err)
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

// finishScript publishes a task's output, marks its run terminal, counts
// its usage and acknowledges its entry, atomically, unless the run is
// already terminal (then it only acknowledges). Running it twice publishes
// once and counts once. The run hash expires a retention after it became
// terminal; the output stream is trimmed to about a maximum length.
//
// KEYS[1] run hash, KEYS[2] output stream, KEYS[3] input stream,
// KEYS[4...] usage hashes to add to: project, worker, and the session's
// (KEYS[6], which expires with the run retention after its last task).
// ARGV[1] group, ARGV[2] entry id ("" for none), ARGV[3] output document,
// ARGV[4] run retention in ms (0: none), ARGV[5] stream MAXLEN (0: none),
// ARGV[6] number of run field/value arguments (r), ARGV[7] number of usage
// field/value arguments (u), ARGV[8] the cost field, ARGV[9] the cost,
// ARGV[10] the run's creation time field (kept when the run exists: a
// requeued task's run was created by its first delivery); then r run
// arguments, then u usage arguments (HINCRBY).
var finishScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
local published = 0
if st ~= 'completed' and st ~= 'failed' then
  if tonumber(ARGV[5]) > 0 then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'data', ARGV[3])
  else
    redis.call('XADD', KEYS[2], '*', 'data', ARGV[3])
  end
  local r, u = tonumber(ARGV[6]), tonumber(ARGV[7])
  local created = redis.call('HGET', KEYS[1], ARGV[10])
  if r > 0 then
    redis.call('HSET', KEYS[1], unpack(ARGV, 11, 10 + r))
  end
  if created then
    redis.call('HSET', KEYS[1], ARGV[10], created)
  end
  for k = 4, #KEYS do
    for i = 11 + r, 10 + r + u, 2 do
      redis.call('HINCRBY', KEYS[k], ARGV[i], ARGV[i + 1])
    end
    redis.call('HINCRBYFLOAT', KEYS[k], ARGV[8], ARGV[9])
  end
  if tonumber(ARGV[4]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    if #KEYS >= 6 then
      -- A session's counters live as long as a run after its last task
      -- (a session per task would otherwise leave a hash per task).
      redis.call('PEXPIRE', KEYS[6], ARGV[4])
    end
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
	// Usage, when set, is added to the usage counters with the output:
	// the task is counted once, with the usage its output reports.
	Usage *TaskUsage
	// RunRetention is how long the run hash lives after this (0: for
	// ever).
	RunRetention time.Duration
}

// TaskUsage is one task's usage and whose counters it goes to.
type TaskUsage struct {
	Project, Session, Worker string // Session "" when unknown
	Usage                    protocol.Usage
	CostUSD                  float64
}

// FinishTask runs the finish script: it returns true when it published the
// output, false when the run was already terminal. With Wait on, WAIT
// follows the script on its connection: a failover must not lose an
// output once its input entry is acknowledged. The WAIT's error (the
// primary gone) is returned as the call's, to be retried (the script is
// idempotent: a retry on the new primary publishes the output only if the
// failover lost it); too few replicas is a *redisconn.NotReplicatedError,
// the output stored on the primary.
func (r *RDB) FinishTask(ctx context.Context, f Finish) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout+r.Wait.Timeout)
	defer cancel()
	keys := []string{r.Keys.Run(f.RequestID), f.OutputStream, f.InputStream}
	var runArgs, usageArgs []any
	for k, v := range f.Run {
		runArgs = append(runArgs, k, v)
	}
	cost := "0"
	if u := f.Usage; u != nil {
		keys = append(keys, r.Keys.UsageProject(u.Project), r.Keys.UsageWorker(u.Worker))
		if u.Session != "" {
			keys = append(keys, r.Keys.UsageSession(u.Session))
		}
		usageArgs = []any{protocol.UsageFieldInput, u.Usage.Input, protocol.UsageFieldOutput, u.Usage.Output,
			protocol.UsageFieldCacheRead, u.Usage.CacheRead, protocol.UsageFieldCacheCreation, u.Usage.CacheCreation,
			protocol.UsageFieldTasks, 1}
		cost = strconv.FormatFloat(u.CostUSD, 'f', -1, 64)
	}
	args := []any{f.Group, f.EntryID, string(f.Output), f.RunRetention.Milliseconds(), r.StreamMaxLen,
		len(runArgs), len(usageArgs), protocol.UsageFieldCostUSD, cost, protocol.RunFieldCreatedAt}
	args = append(append(args, runArgs...), usageArgs...)
	if !r.Wait.On() {
		n, err := finishScript.Run(ctx, r.c, keys, args...).Int()
		if err != nil {
			return false, fmt.Errorf("rdb: finish task %s: %w", f.RequestID, err)
		}
		return n == 1, nil
	}
	// EVALSHA, then EVAL when the server does not know the script (a new
	// primary after a failover, a restart), each followed by its WAIT.
	var run *redis.Cmd
	err := redisconn.PipelineWait(ctx, r.c, r.Wait, func(p redis.Pipeliner) { run = finishScript.EvalSha(ctx, p, keys, args...) })
	if run.Err() != nil && redis.HasErrorPrefix(run.Err(), "NOSCRIPT") {
		err = redisconn.PipelineWait(ctx, r.c, r.Wait, func(p redis.Pipeliner) { run = finishScript.Eval(ctx, p, keys, args...) })
	}
	if run.Err() != nil {
		return false, fmt.Errorf("rdb: finish task %s: %w", f.RequestID, run.Err())
	}
	n, nerr := run.Int()
	switch {
	case err == nil, redisconn.IsNotReplicated(err):
	case nerr == nil:
		err = fmt.Errorf("rdb: finish task %s: wait for replicas: %w", f.RequestID, err)
	default: // the pipeline failed as a whole (a login refused, a connection lost)
		err = fmt.Errorf("rdb: finish task %s: %w", f.RequestID, err)
	}
	return n == 1, err
}
