package rdb

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/redis/go-redis/v9"
)

// Finisher is what the publisher calls for the writes that must not be
// lost: a task's output with its run and usage, and an entry's
// acknowledgement.
type Finisher interface {
	FinishTask(ctx context.Context, f Finish) (bool, error)
	PublishOutput(ctx context.Context, stream string, doc []byte, input, group, entryID string) error
	Ack(ctx context.Context, stream, group, id string) error
}

// finishCmds implements Finisher over the shared connection.
type finishCmds struct{ *core }

var _ Finisher = (*finishCmds)(nil)

// Ack acknowledges an entry.
func (r *finishCmds) Ack(ctx context.Context, stream, group, id string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.XAck(ctx, stream, group, id).Err()
}

// PublishOutput appends an output document to its stream and acknowledges
// the task's entry, in one transaction, without the run hash: the way out
// when Redis refuses the finish script (a run key of the wrong type, say).
// Only the XADD's error counts: an acknowledgement refused (its group
// deleted) leaves the entry pending, and the output is out.
func (r *finishCmds) PublishOutput(ctx context.Context, stream string, doc []byte, input, group, entryID string) error {
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
func (r *finishCmds) FinishTask(ctx context.Context, f Finish) (bool, error) {
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
