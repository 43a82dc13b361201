package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// publisher is the last stage of the pipeline: everything the wrapper
// tells Redis. Events (lifecycle, status, run, progress, control) go
// through the Outbox, in order, and wait there while Redis is unreachable.
// Writes that must not be lost (a task's output and its acknowledgement)
// go through store, which retries until Redis takes them, refuses them
// for good, or the shutdown's bound passes (final).
//
// What it promises: a task's output is stored once (rdb.FinishTask), or,
// when the retries end, its input entry stays unacknowledged, so that the
// task is delivered again (to this worker's next start, or by the
// spawner's recovery) and nothing is lost. The retries end only when
// final ends: finalGrace after Terminate (the shutdown's grace ran out,
// or a second signal), so that a wrapper whose Redis stays away still
// exits before its engine kills it.
type publisher struct {
	publisherParams
	out *Outbox
}

// publisherRedis is what the publisher writes: events, and the writes
// that must not be lost.
type publisherRedis interface {
	rdb.Events
	rdb.Finisher
}

// publisherParams are what a publisher is built from.
type publisherParams struct {
	rdb          publisherRedis
	keys         protocol.Keys
	workerID     string
	host         string
	log          *slog.Logger
	now          func() time.Time
	redact       *Redactor
	runRetention time.Duration
	waitTimeout  time.Duration // WAIT's, when a write must reach a replica
	eventBuffer  int           // the Outbox's bound (EVENT_BUFFER)
	// final is the context of the writes that must not be lost: it ends
	// finalGrace after Terminate (terminator.final).
	final context.Context
}

func newPublisher(p publisherParams) *publisher {
	out := NewOutbox(p.eventBuffer, p.log)
	out.Permanent = rdb.IsServerError
	return &publisher{publisherParams: p, out: out}
}

// errStoreEnded: the shutdown's bound ended a write's retries.
var errStoreEnded = errors.New("worker: the shutdown's bound ended the retries of a write")

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

// history queues an entry of the worker's capped state history.
func (p *publisher) history(doc []byte) {
	key := p.keys.StatusHistory(p.workerID)
	p.out.Push("history", func(ctx context.Context) error { return p.rdb.PushCapped(ctx, key, doc, protocol.MaxStatusHistory) })
}

// idle queues this worker's place in the developer idle set: in it,
// scored with the time, or out of it.
func (p *publisher) idle(idle bool) {
	key, id, at := p.keys.DeveloperIdle(), p.workerID, p.now()
	p.out.Push("idle set", func(ctx context.Context) error { return p.rdb.SetIdle(ctx, key, id, idle, at) })
}

// failed records that the wrapper cannot work (status failed, a failed
// lifecycle event), at once, as far as Redis answers before ctx ends.
func (p *publisher) failed(ctx context.Context, cause error, exitCode int) {
	now := p.now()
	msg := p.redact.Redact(cause.Error())
	_ = p.rdb.HSet(ctx, p.keys.Status(p.workerID), map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerFailed), protocol.StatusFieldError: msg,
		protocol.StatusFieldExitCode: exitCode, protocol.StatusFieldUpdatedAt: protocol.FormatTime(now)})
	l := protocol.Lifecycle{WorkerID: p.workerID, Event: protocol.EventFailed, Source: protocol.SourceWrapper,
		Timestamp: now, Detail: map[string]any{"error": msg, "exit_code": exitCode}, Host: p.host}
	if doc, err := l.Encode(); err == nil {
		_ = p.rdb.XAdd(ctx, p.keys.Lifecycle(), doc)
	}
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

// refusal publishes a refused call of the agent as a warning of cur;
// code is the runtime's stable code of the refusal ("" for a tool call
// ALLOWED_COMMANDS refused).
func (p *publisher) refusal(cur *current, tool, command, reason, code string) {
	command = p.redact.Redact(command)
	if len(command) > protocol.MaxRefusedCommandBytes {
		command = cutUTF8(command, protocol.MaxRefusedCommandBytes)
	}
	step := cutUTF8("refused: "+tool+" "+command, 1024)
	p.event(cur, protocol.Progress{Step: step, Level: protocol.LevelWarning,
		Refused: &protocol.Refusal{Tool: tool, Code: code, Command: command, Reason: cutUTF8(p.redact.Redact(reason), 1024)}})
}

// gatewayRefusal publishes what a sealed worker's gateway refused (a
// connection off its egress allowlist, a model call without the worker's
// token, a connection over its budget) as a warning of cur.
func (p *publisher) gatewayRefusal(cur *current, r gateway.Refusal) {
	req := cutUTF8(p.redact.Redact(r.Request), protocol.MaxRefusedCommandBytes)
	host := cutUTF8(r.Host, 253)
	what := r.Tool + " " + req
	if host != "" {
		what = fmt.Sprintf("%s %s:%d", r.Tool, host, r.Port)
	}
	tool := r.Tool
	if tool == "" || len(tool) > 200 {
		tool = protocol.RefusedToolNetwork
	}
	p.event(cur, protocol.Progress{Step: cutUTF8("refused: "+what, 1024), Level: protocol.LevelWarning,
		Refused: &protocol.Refusal{Tool: tool, Code: cutUTF8(r.Code, 64), Command: req, Host: host, Port: r.Port,
			Reason: cutUTF8(p.redact.Redact(r.Reason), 1024)}})
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
	p.refusal(cur, d.Tool, cmd, "denied by the agent CLI's permission rules (ALLOWED_COMMANDS)", "")
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
				sleepCtx(c, p.waitTimeout)
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
	if errors.Is(err, errStoreEnded) {
		log.Error("task output not stored before the shutdown's bound: its entry stays pending, to be delivered again", "err", err)
		return false
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
// task loop. It gives up, with errStoreEnded, when the publisher's final
// context ends (the shutdown's bound). what names the write for logs.
func store[T any](p *publisher, what string, f func(context.Context) (T, error)) (T, error) {
	b := newBackoff()
	for {
		v, err := f(p.final)
		if err == nil {
			return v, nil
		}
		if p.final.Err() != nil {
			return v, fmt.Errorf("%s: %w (%w)", what, errStoreEnded, err)
		}
		if rdb.IsServerError(err) {
			p.log.Error("redis refused a write; giving up on it", "write", what, "err", err)
			return v, err
		}
		d := b.next()
		p.log.Warn("redis call failed, retrying", "write", what, "err", err, "backoff", d)
		sleepCtx(p.final, d)
	}
}
