package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/egress"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
	"github.com/cenkalti/backoff/v5"
)

// publisher is the last stage of the pipeline: everything the wrapper
// tells Redis. Events (lifecycle, status, run, progress, control) go
// through the Outbox, in order, and wait there while Redis is unreachable.
// Writes that must not be lost (a task's output and its acknowledgement)
// go through store, which retries until Redis takes them or refuses them
// for good.
type publisher struct {
	rdb          *rdb.RDB
	keys         protocol.Keys
	workerID     string
	host         string
	log          *slog.Logger
	now          func() time.Time
	redact       *Redactor
	runRetention time.Duration
	waitTimeout  time.Duration // WAIT's, when a write must reach a replica
	out          *Outbox
}

func newPublisher(r *rdb.RDB, cfg Config, log *slog.Logger, now func() time.Time, redact *Redactor) *publisher {
	out := NewOutbox(cfg.EventBuffer, log)
	out.Permanent = rdb.IsServerError
	return &publisher{rdb: r, keys: cfg.Keys, workerID: cfg.WorkerID, host: cfg.Host, log: log, now: now, redact: redact,
		runRetention: cfg.RunRetention, waitTimeout: cfg.RedisWait.Timeout, out: out}
}

// lifecycle queues a lifecycle event of this worker.
func (p *publisher) lifecycle(ev protocol.Event, reqID, taskID string, detail map[string]any) {
	l := protocol.Lifecycle{WorkerID: p.workerID, Event: ev, Source: protocol.SourceWrapper,
		Timestamp: p.now(), RequestID: reqID, TaskID: taskID, Detail: detail, Host: p.host}
	doc, err := l.Encode()
	if err != nil {
		p.log.Error("encode lifecycle event", "event", ev, "err", err)
		return
	}
	key := p.keys.Lifecycle()
	p.out.Push("lifecycle "+string(ev), func(ctx context.Context) error { return p.rdb.XAdd(ctx, key, doc) })
}

// status queues fields of this worker's status hash (updated_at added).
func (p *publisher) status(fields map[string]any) {
	fields[protocol.StatusFieldUpdatedAt] = protocol.FormatTime(p.now())
	key := p.keys.Status(p.workerID)
	p.out.Push("status", func(ctx context.Context) error { return p.rdb.HSet(ctx, key, fields) })
}

// run queues the run hash of cur as it stands.
func (p *publisher) run(cur *current) { p.runHash(cur.task.RequestID, cur.runFields()) }

// runHash queues fields of a run hash; the run never moves backward.
func (p *publisher) runHash(requestID string, fields map[string]any) {
	p.out.Push("run "+fmt.Sprint(fields[protocol.RunFieldStatus]), func(ctx context.Context) error {
		return p.rdb.AdvanceRun(ctx, requestID, fields)
	})
}

// entry queues a document for a stream (progress on an output stream, a
// control request).
func (p *publisher) entry(name, stream string, doc []byte) {
	p.out.Push(name, func(ctx context.Context) error { return p.rdb.XAdd(ctx, stream, doc) })
}

// ack acknowledges a source's input entry, retried as store does.
func (p *publisher) ack(src taskSource) {
	_, _ = store(p, "ack "+src.entryID, func(c context.Context) (struct{}, error) {
		return struct{}{}, p.rdb.Ack(c, src.stream, src.group, src.entryID)
	})
}

// pushEvent publishes a progress event of cur, with the ids, the run's
// step count and the time filled in, and its text redacted.
func (p *publisher) event(cur *current, pr protocol.Progress) {
	if cur.src.output == "" { // a run of the wrapper's own (a session summary)
		return
	}
	cur.mu.Lock()
	n := cur.run.StepsCompleted
	cur.mu.Unlock()
	pr.WorkerID, pr.RequestID, pr.TaskID, pr.StepsCompleted, pr.Timestamp = p.workerID, cur.task.RequestID, cur.task.TaskID, n, p.now()
	pr.Step, pr.Output = p.redact.Redact(pr.Step), p.redact.Redact(pr.Output)
	doc, err := pr.Encode()
	if err != nil {
		return
	}
	p.entry("progress", cur.src.output, doc)
}

// progress publishes a progress step of cur at level ("" for info).
func (p *publisher) progress(cur *current, step, level string) {
	p.event(cur, protocol.Progress{Step: step, Level: level})
}

// refusal publishes a refused call of the agent as a warning of cur.
func (p *publisher) refusal(cur *current, tool, command, reason string) {
	command = p.redact.Redact(command)
	if len(command) > protocol.MaxRefusedCommandBytes {
		command = cutUTF8(command, protocol.MaxRefusedCommandBytes)
	}
	step := cutUTF8("refused: "+tool+" "+command, 1024)
	p.event(cur, protocol.Progress{Step: step, Level: protocol.LevelWarning,
		Refused: &protocol.Refusal{Tool: tool, Command: command, Reason: cutUTF8(p.redact.Redact(reason), 1024)}})
}

// refusedConnection publishes a connection a sealed worker's gateway
// refused (not on its egress allowlist) as a warning of cur.
func (p *publisher) refusedConnection(cur *current, r egress.Refusal) {
	req := cutUTF8(p.redact.Redact(r.Request), protocol.MaxRefusedCommandBytes)
	host := cutUTF8(r.Host, 253)
	step := cutUTF8(fmt.Sprintf("refused: network %s:%d", host, r.Port), 1024)
	p.event(cur, protocol.Progress{Step: step, Level: protocol.LevelWarning,
		Refused: &protocol.Refusal{Tool: "network", Command: req, Host: host, Port: r.Port,
			Reason: "not on the worker's egress allowlist"}})
}

// denial publishes a call the agent CLI itself denied (Claude's
// permission_denials) as a refusal.
func (p *publisher) denial(cur *current, d *agent.Denial) {
	var in struct {
		Command string `json:"command"`
	}
	cmd := ""
	if json.Unmarshal(d.Input, &in) == nil && in.Command != "" {
		cmd = in.Command
	} else {
		cmd = string(d.Input)
	}
	p.refusal(cur, d.Tool, cmd, "denied by the agent CLI's permission rules (ALLOWED_COMMANDS)")
}

// storeOutput stores a task's output with its run's terminal fields and
// its usage, and acknowledges its entry, in one atomic step
// (rdb.FinishTask), retried while Redis is unreachable: the output is
// never lost, and never published twice. When Redis refuses that step for
// good (a run key of the wrong type, a missing permission), the output
// still goes out, failed with INTERNAL_ERROR and saying why, without the
// run hash; when Redis refuses that too, the entry is acknowledged and the
// loss logged: a task Redis will not take must not wedge the loop. It
// reports whether an output was published.
func (p *publisher) storeOutput(log *slog.Logger, src taskSource, o protocol.Output, run map[string]any, usage *rdb.TaskUsage) bool {
	o, doc, err := encodeOutput(log, p.redact, p.now, o)
	if err != nil {
		log.Error("encode output", "err", err)
		return false
	}
	// With WAIT on (a sentinel URL), a write no replica acknowledged is
	// made again once, one WAIT timeout later: a failover that promoted a
	// replica the output had not reached has a new primary by then, which
	// the client has switched to, and the idempotent script publishes the
	// output there. A second short answer leaves it on the primary alone
	// (no replica in sync).
	var published bool
	short := 0
	_, err = store(p, "output "+o.RequestID, func(c context.Context) (struct{}, error) {
		ok, err := p.rdb.FinishTask(c, rdb.Finish{RequestID: o.RequestID, OutputStream: src.output, Output: doc, Run: run,
			InputStream: src.stream, Group: src.group, EntryID: src.entryID, Usage: usage, RunRetention: p.runRetention})
		published = published || ok
		if redisconn.IsNotReplicated(err) {
			if short++; short < 2 {
				time.Sleep(p.waitTimeout)
				return struct{}{}, err
			}
			log.Warn("task output stored on the primary alone: no replica acknowledged it", "err", err)
			err = nil
		}
		return struct{}{}, err
	})
	if err == nil {
		return published
	}
	fo := o
	fo.Status, fo.Result, fo.Question = protocol.StatusFailed, nil, ""
	fo.Error = protocol.NewError(protocol.CodeInternalError, "redis refused to store the task's output: %s", p.redact.Redact(err.Error()))
	if doc, err = fo.Encode(); err == nil {
		_, err = store(p, "failed output "+o.RequestID, func(c context.Context) (struct{}, error) {
			return struct{}{}, p.rdb.PublishOutput(c, src.output, doc, src.stream, src.group, src.entryID)
		})
	}
	if err == nil {
		log.Error("output stored without its run hash, as failed", "code", protocol.CodeInternalError)
		return true
	}
	log.Error("task output lost: redis refused it", "err", err)
	if src.entryID != "" {
		p.ack(src)
	}
	return false
}

// store calls f until Redis takes it, with backoff while Redis is
// unreachable, and returns at once the error of a Redis that refused it
// (rdb.IsServerError): retrying that cannot help, and would wedge the
// task loop. what names the write for logs.
func store[T any](p *publisher, what string, f func(context.Context) (T, error)) (T, error) {
	b := newBackoff()
	for {
		v, err := f(context.Background())
		if err == nil {
			return v, nil
		}
		if rdb.IsServerError(err) {
			p.log.Error("redis refused a write; giving up on it", "write", what, "err", err)
			return v, err
		}
		d := b.next()
		p.log.Warn("redis call failed, retrying", "write", what, "err", err, "backoff", d)
		time.Sleep(d)
	}
}

// retry is the wait between retries of a Redis call the wrapper must
// make (an output, a read of its input): from 100 ms, doubled up to 5 s,
// with jitter, never giving up on its own (the caller's context does).
// The one backoff of the wrapper, from a well-kept library.
type retry struct{ b *backoff.ExponentialBackOff }

func newBackoff() *retry {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier, b.RandomizationFactor = 100*time.Millisecond, 5*time.Second, 2, 0.25
	return &retry{b: b}
}

func (r *retry) reset() { r.b.Reset() }

// next is the wait before the next retry.
func (r *retry) next() time.Duration { return r.b.NextBackOff() }

func (r *retry) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(r.next()):
	}
}

// Outbox keeps the events the wrapper publishes (lifecycle, progress,
// status and run updates) in a bounded FIFO and writes them to Redis in
// order, retrying with backoff while Redis is unreachable. When the buffer
// is full the oldest event is dropped and counted, and so is an event
// Redis refuses for good (Permanent). A task's output never goes through
// the outbox: the task runner stores it through store, after Flush.
type Outbox struct {
	max int
	log *slog.Logger

	mu    sync.Mutex // guards q and empty
	q     []outOp
	empty chan struct{} // closed while q is empty and nothing is in flight
	wake  chan struct{}
	seq   uint64 // guarded by mu

	dropped atomic.Int64

	// Permanent, when set, tells an error that no retry can mend.
	Permanent func(error) bool
}

type outOp struct {
	seq  uint64
	name string
	do   func(ctx context.Context) error
}

// NewOutbox returns an outbox that holds at most max events.
func NewOutbox(max int, log *slog.Logger) *Outbox {
	e := make(chan struct{})
	close(e)
	return &Outbox{max: max, log: log, empty: e, wake: make(chan struct{}, 1)}
}

// Push queues an event; name says what it is, for logs.
func (o *Outbox) Push(name string, do func(ctx context.Context) error) {
	o.mu.Lock()
	if len(o.q) == 0 {
		o.empty = make(chan struct{})
	}
	o.seq++
	o.q = append(o.q, outOp{seq: o.seq, name: name, do: do})
	if len(o.q) > o.max {
		o.log.Warn("event buffer full, dropping the oldest event", "event", o.q[0].name, "buffer", o.max)
		o.q = o.q[1:]
		o.dropped.Add(1)
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Dropped returns how many events were dropped because the buffer was full.
func (o *Outbox) Dropped() int64 { return o.dropped.Load() }

// Len returns how many events wait.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.q)
}

// Flush waits until every queued event is written, or ctx ends.
func (o *Outbox) Flush(ctx context.Context) error {
	o.mu.Lock()
	e := o.empty
	o.mu.Unlock()
	select {
	case <-e:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run writes events until ctx ends. It owns the head of the queue: an
// event leaves the queue only once written.
func (o *Outbox) Run(ctx context.Context) {
	retry := newBackoff()
	retry.b.InitialInterval = 50 * time.Millisecond
	retry.reset()
	for {
		o.mu.Lock()
		var head outOp
		n := len(o.q)
		if n > 0 {
			head = o.q[0]
		}
		o.mu.Unlock()
		if n == 0 {
			select {
			case <-ctx.Done():
				return
			case <-o.wake:
				continue
			}
		}
		err := head.do(ctx)
		if err != nil && o.Permanent != nil && o.Permanent(err) {
			// Redis answered, and refused: retrying cannot help, and the
			// event would block every one behind it.
			o.log.Error("event refused by Redis, dropped", "event", head.name, "err", err)
			o.dropped.Add(1)
			err = nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := retry.next()
			o.log.Debug("event not written, will retry", "event", head.name, "err", err, "backoff", d)
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		retry.reset()
		o.mu.Lock()
		// Push may have dropped the head meanwhile: remove it only if it
		// is still there.
		if len(o.q) > 0 && o.q[0].seq == head.seq {
			o.q = o.q[1:]
		}
		if len(o.q) == 0 {
			select {
			case <-o.empty:
			default:
				close(o.empty)
			}
		}
		o.mu.Unlock()
	}
}
