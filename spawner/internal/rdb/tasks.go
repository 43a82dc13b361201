package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Tasks is what the spawner reads and does on a worker's input: whether a
// task is in flight or waiting (the pause rule), the entries held or not
// yet delivered, and a task answered, handed on, moved or trimmed in the
// worker's stead.
type Tasks interface {
	Busy(ctx context.Context, id, input, group string) (Busy, error)
	BusyDelivered(ctx context.Context, id, input, group string) (Busy, string, error)
	BusyAnyway(ctx context.Context, id, input, group string) (Busy, string, error)
	WaitInputs(ctx context.Context, streams, after []string, block time.Duration) ([]string, error)
	Held(ctx context.Context, stream, group, consumer string) ([]Entry, error)
	Waiting(ctx context.Context, stream, group string) ([]Entry, error)
	Answer(ctx context.Context, o protocol.Output, output, input, group, entryID string, now time.Time) (bool, error)
	Requeue(ctx context.Context, requestID, input, group string, e redis.XMessage) (int, error)
	Move(ctx context.Context, from, to string, m redis.XMessage, ackGroup string) (bool, error)
	TrimInput(ctx context.Context, stream, group string) (int, error)
}

// taskCmds implements Tasks over the shared connection.
type taskCmds struct{ *core }

var _ Tasks = (*taskCmds)(nil)

// Busy says why a worker may not be paused ("" when it may): its status
// says a task is in flight, it holds an entry it read and did not
// acknowledge, or its input holds an entry its group has not delivered.
type Busy string

// Reasons a worker is busy.
const (
	NotBusy     Busy = ""
	BusyTask    Busy = "task_in_flight"
	BusyHeld    Busy = "task_held"
	BusyWaiting Busy = "task_waiting"
	// BusyEnding: the worker is being retired (it left the workers set)
	// or its wrapper is shutting down: freezing it would only stall its
	// end.
	BusyEnding Busy = "ending"
)

// busyScript: KEYS status hash, input stream, workers set; ARGV group,
// consumer (the worker id), and "any" to look at a worker that is not a
// member (being retired or hibernated).
// One read of everything that says a task is in flight, atomic with the
// entries' delivery, so that no task can slip between the checks. It
// answers {reason, the group's last-delivered id ("0-0" when none)}:
// an entry added after that id is a task waiting.
var busyScript = script(`
$LESS
$DELIVERED
if ARGV[3] ~= 'any' and redis.call('SISMEMBER', KEYS[3], ARGV[2]) == 0 then return {'ending', '0-0'} end
local h = redis.call('HMGET', KEYS[1], '$WORKER_STATE', '$WORKER_REQUEST')
if h[1] == '$STOPPING' or h[1] == '$STOPPED' then return {'ending', '0-0'} end
if h[1] == '$BUSY' or (h[2] and h[2] ~= '') then return {'task_in_flight', '0-0'} end
if redis.call('EXISTS', KEYS[2]) == 0 then return {'', '0-0'} end
local ok, p = pcall(redis.call, 'XPENDING', KEYS[2], ARGV[1], '-', '+', 1, ARGV[2])
if ok and #p > 0 then return {'task_held', '0-0'} end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local d = delivered(KEYS[2], ARGV[1])
if #last == 0 then return {'', d or '0-0'} end
if d == nil then return {'task_waiting', '0-0'} end
if less(d, last[1][1]) then return {'task_waiting', d} end
return {'', d}
`)

// Busy reports whether a worker has a task in flight or waiting. input
// and group are its input stream and consumer group; the consumer is its
// id.
func (r *taskCmds) Busy(ctx context.Context, id, input, group string) (Busy, error) {
	b, _, err := r.BusyDelivered(ctx, id, input, group)
	return b, err
}

// BusyDelivered is Busy, and the id of the last entry of input its group
// delivered ("0-0" when none): an entry after it is a task waiting, so a
// blocking read of input from it returns when one comes.
func (r *taskCmds) BusyDelivered(ctx context.Context, id, input, group string) (Busy, string, error) {
	return r.busy(ctx, id, input, group, "")
}

// BusyAnyway is BusyDelivered for a worker that is not a member of
// Workers (being hibernated, or hibernated): a task in flight, held or
// waiting on its input.
func (r *taskCmds) BusyAnyway(ctx context.Context, id, input, group string) (Busy, string, error) {
	return r.busy(ctx, id, input, group, "any")
}

func (r *taskCmds) busy(ctx context.Context, id, input, group, mode string) (Busy, string, error) {
	res, err := busyScript.Run(ctx, r.c, []string{r.Keys.Status(id), input, r.Keys.Workers()}, group, id, mode).StringSlice()
	if err != nil {
		return NotBusy, "", err
	}
	if len(res) != 2 {
		return NotBusy, "", fmt.Errorf("rdb: busy answered %v", res)
	}
	return Busy(res[0]), res[1], nil
}

// WaitInputs blocks at most block for an entry added to any of streams
// after its id in after (XREAD), and returns the streams that got one
// (none when the time ran out).
func (r *taskCmds) WaitInputs(ctx context.Context, streams, after []string, block time.Duration) ([]string, error) {
	res, err := r.c.XRead(ctx, &redis.XReadArgs{Streams: append(append([]string{}, streams...), after...), Count: 1, Block: block}).Result()
	if Nil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(res))
	for _, s := range res {
		if len(s.Messages) > 0 {
			out = append(out, s.Stream)
		}
	}
	return out, nil
}

// Entry is a stream entry with its task (ok false when it does not decode
// as one).
type Entry struct {
	Msg  redis.XMessage
	Task protocol.Task
	OK   bool
}

func decode(m redis.XMessage) Entry {
	data, _ := protocol.EntryData(m.Values)
	t, err := protocol.DecodeTask(data)
	return Entry{Msg: m, Task: t, OK: err == nil}
}

// Held returns the entries (up to 1000) consumer holds pending on stream
// in group, oldest first.
func (r *taskCmds) Held(ctx context.Context, stream, group, consumer string) ([]Entry, error) {
	pend, err := r.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 1000, Consumer: consumer}).Result()
	if noGroup(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, p := range pend {
		msgs, err := r.c.XRangeN(ctx, stream, p.ID, p.ID, 1).Result()
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			// Deleted or trimmed: nothing left to answer; acknowledge.
			r.c.XAck(ctx, stream, group, p.ID)
			continue
		}
		out = append(out, decode(msgs[0]))
	}
	return out, nil
}

// Waiting returns the entries of stream that group has not delivered yet.
func (r *taskCmds) Waiting(ctx context.Context, stream, group string) ([]Entry, error) {
	last := "0-0"
	groups, err := r.c.XInfoGroups(ctx, stream).Result()
	if err != nil && !noGroup(err) {
		return nil, err
	}
	for _, g := range groups {
		if g.Name == group {
			last = g.LastDeliveredID
		}
	}
	msgs, err := r.c.XRange(ctx, stream, "("+last, "+").Result()
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(msgs))
	for i, m := range msgs {
		out[i] = decode(m)
	}
	return out, nil
}

// noGroup reports whether err says the stream or its group does not
// exist: nothing was ever delivered there.
func noGroup(err error) bool {
	return redis.HasErrorPrefix(err, "NOGROUP") || redis.HasErrorPrefix(err, "no such key")
}

// answerScript publishes a failed output for a task and marks its run
// failed, unless the run is already terminal (its worker answered it, or
// a first run of this script did); it acknowledges the entry and sets
// the run hash's expiry. KEYS run hash, output stream, input stream;
// ARGV group, entry id ("" for none), output doc, run error, now,
// retention seconds, maxlen.
var answerScript = script(`
if ARGV[2] ~= '' then redis.call('XACK', KEYS[3], ARGV[1], ARGV[2]) end
local st = redis.call('HGET', KEYS[1], '$RUN_STATUS')
if st == '$COMPLETED' or st == '$FAILED' then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', '$DATA', ARGV[3])
redis.call('HSET', KEYS[1], '$RUN_STATUS', '$FAILED', '$RUN_ERROR', ARGV[4], '$RUN_FINISHED_AT', ARGV[5], '$RUN_UPDATED_AT', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return 1
`)

// Answer publishes o (a failed output) for the task of entry on input
// (entryID "" when the task has no pending entry) unless its run is
// already terminal, and reports whether it published.
func (r *taskCmds) Answer(ctx context.Context, o protocol.Output, output, input, group, entryID string, now time.Time) (bool, error) {
	doc, err := o.Encode()
	if err != nil {
		return false, err
	}
	msg := ""
	if o.Error != nil {
		msg = string(o.Error.Code) + ": " + o.Error.Message
	}
	n, err := answerScript.Run(ctx, r.c, []string{r.Keys.Run(o.RequestID), output, input}, group, entryID, string(doc), msg,
		protocol.FormatTime(now), int64(r.RunRetention.Seconds()), r.StreamMaxLen).Int()
	return n == 1, err
}

// requeueScript hands a developer task to another worker: the entry is
// added again to the queue and the held one acknowledged, unless the run
// finished meanwhile or the entry is no longer held (a first run of this
// script moved it). KEYS run hash, input stream; ARGV group, entry id,
// task document, consumer. Returns the run's attempts after it, or 0.
var requeueScript = script(`
local p = redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
local st = redis.call('HGET', KEYS[1], '$RUN_STATUS')
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
if st == '$COMPLETED' or st == '$FAILED' then return 0 end
local n = redis.call('HINCRBY', KEYS[1], '$RUN_ATTEMPTS', 1)
redis.call('XADD', KEYS[2], '*', '$DATA', ARGV[3])
return n
`)

// Requeue hands the held developer task of entry back to the queue; it
// returns the run's count of extra deliveries, or 0 when nothing moved.
func (r *taskCmds) Requeue(ctx context.Context, requestID, input, group string, e redis.XMessage) (int, error) {
	data, _ := protocol.EntryData(e.Values)
	return requeueScript.Run(ctx, r.c, []string{r.Keys.Run(requestID), input}, group, e.ID, string(data)).Int()
}

// moveScript moves an entry from one stream to another unless it is gone
// from the first already (a first run moved it). KEYS from, to; ARGV id,
// data, group to acknowledge in ("" for none).
var moveScript = script(`
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', '$DATA', ARGV[2])
if ARGV[3] ~= '' then redis.call('XACK', KEYS[1], ARGV[3], ARGV[1]) end
redis.call('XDEL', KEYS[1], ARGV[1])
return 1
`)

// Move moves entry m from one stream to another (acknowledging it in
// ackGroup first when given), at most once.
func (r *taskCmds) Move(ctx context.Context, from, to string, m redis.XMessage, ackGroup string) (bool, error) {
	data, _ := protocol.EntryData(m.Values)
	n, err := moveScript.Run(ctx, r.c, []string{from, to}, m.ID, string(data), ackGroup).Int()
	return n == 1, err
}

// trimScript trims from an input stream the entries its group delivered
// and that no consumer holds: below the oldest pending entry and the
// group's last delivered entry. KEYS stream; ARGV group. Returns how many
// entries went.
var trimScript = script(`
$LESS
$DELIVERED
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local bound = delivered(KEYS[1], ARGV[1])
if bound == nil or bound == '0-0' then return 0 end
local p = redis.call('XPENDING', KEYS[1], ARGV[1])
if p[1] > 0 and less(p[2], bound) then bound = p[2] end
return redis.call('XTRIM', KEYS[1], 'MINID', bound)
`)

// TrimInput drops from an input stream the entries its group has
// delivered and acknowledged; an entry not yet delivered or still held is
// never trimmed.
func (r *taskCmds) TrimInput(ctx context.Context, stream, group string) (int, error) {
	return trimScript.Run(ctx, r.c, []string{stream}, group).Int()
}
