package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Tasks puts tasks on workers' input streams and follows them to their
// output: the send-and-wait loop of every client (workerctl send -wait,
// the quickstart, the demo) written once. It talks to Redis only, so it
// works with no worker-manager in the process, and reads without a
// consumer group: any number of clients may await the same task.
type Tasks struct {
	Redis redis.Cmdable
	Keys  protocol.Keys
	// Wait is WAIT's policy for Send, Cancel and Answer (zero: no WAIT); redisconn.Policy
	// gives the environment's for a Redis URL (one replica for a sentinel
	// URL), so that a failover does not lose a task once Send returned.
	Wait protocol.WaitPolicy
}

// Sent is a task on its way: where its output will appear, and the entry
// of that stream after which to look for it.
type Sent struct {
	RequestID string
	WorkerID  string
	Input     string // the input stream the task went to
	// Control is where the task's cancel and permission replies go: the
	// worker's input, or the normal developer queue for a developer task
	// of any priority ("" in a Sent made by hand: Input).
	Control string
	Output  string // the output stream the worker answers on
	After   string // the output stream's last entry id before the send
}

// ErrAwaitTimeout is returned by Await and Watch when their context's
// deadline passes before the task's output arrives.
var ErrAwaitTimeout = errors.New("client: no output before the deadline")

// Send checks task (a request id is made when it has none), and adds it
// to the input stream of the worker (or to the developer queue for a
// developer worker). The worker's kind comes from its status hash: a
// worker without one is NOT_FOUND.
func (t *Tasks) Send(ctx context.Context, workerID string, task protocol.Task) (Sent, error) {
	st, err := t.Redis.HMGet(ctx, t.Keys.Status(workerID), protocol.StatusFieldKind, protocol.StatusFieldAgentType).Result()
	if err != nil {
		return Sent{}, redisError(err, "send: read worker %s", workerID)
	}
	kind, isWorker := st[0].(string)
	if !isWorker {
		return Sent{}, Errorf(protocol.CodeNotFound, "no worker %s", workerID)
	}
	agentType, _ := st[1].(string)
	k := protocol.Kind(kind)
	if k == "" {
		k = protocol.KindLongLived
	}
	if task.RequestID == "" {
		task.RequestID = fmt.Sprintf("task-%d", time.Now().UnixNano())
	}
	doc, err := task.Encode()
	if err != nil {
		return Sent{}, Errorf(protocol.CodeInvalidTask, "send: %v", err)
	}
	if _, err := protocol.DecodeTask(doc); err != nil {
		return Sent{}, Errorf(protocol.CodeInvalidTask, "send: %v", err)
	}
	r := streams{t.Redis, t.Wait}
	sent := Sent{RequestID: task.RequestID, WorkerID: workerID, Input: t.Keys.InputFor(k, workerID), Output: t.Keys.OutputFor(k, workerID)}
	sent.Control = sent.Input
	runWorker := workerID
	if k == protocol.KindDeveloper {
		runWorker = ""                                       // whichever developer worker reads it says so
		sent.Input = t.Keys.DeveloperInputFor(task.Priority) // its priority's queue
	}
	now := protocol.FormatTime(time.Now())
	// One round trip: the output stream's last entry (outputs after it are
	// the task's: "$" would miss one written between the XADD and the
	// first XREAD), and the run, which exists from now, requested, so
	// that a poller tells a task waiting for its worker from an unknown
	// one (a run that exists is left as it is: the wrapper moves it on,
	// never back).
	pipe := t.Redis.Pipeline()
	last := pipe.XRevRangeN(ctx, sent.Output, "+", "-", 1)
	createRunScript.Eval(ctx, pipe, []string{t.Keys.Run(task.RequestID)},
		protocol.RunFieldRequestID, task.RequestID, protocol.RunFieldTaskID, task.TaskID, protocol.RunFieldWorkerID, runWorker,
		protocol.RunFieldProjectID, task.Project(), protocol.RunFieldAgentSlug, agentType, protocol.RunFieldTrigger, task.Trigger,
		protocol.RunFieldStatus, string(protocol.RunRequested),
		protocol.RunFieldCreatedAt, now, protocol.RunFieldUpdatedAt, now)
	if _, err := pipe.Exec(ctx); err != nil {
		return Sent{}, redisError(err, "send: output stream of %s and run %s", workerID, task.RequestID)
	}
	sent.After = "0-0"
	if msgs := last.Val(); len(msgs) == 1 {
		sent.After = msgs[0].ID
	}
	if err := r.send(ctx, sent.Input, doc); err != nil {
		return Sent{}, redisError(err, "send: task %s to %s", task.RequestID, workerID)
	}
	return sent, nil
}

// Of returns the Sent of a task put on a worker by someone else (another
// process, a shell): where to cancel it, answer it or watch its output,
// from the worker's kind in its status hash (NOT_FOUND without one). Its
// After is the start of the output stream.
func (t *Tasks) Of(ctx context.Context, workerID, requestID string) (Sent, error) {
	kind, err := t.Redis.HGet(ctx, t.Keys.Status(workerID), protocol.StatusFieldKind).Result()
	if errors.Is(err, redis.Nil) {
		return Sent{}, Errorf(protocol.CodeNotFound, "no worker %s", workerID)
	}
	if err != nil {
		return Sent{}, redisError(err, "read worker %s", workerID)
	}
	k := protocol.Kind(kind)
	if k == "" {
		k = protocol.KindLongLived
	}
	in := t.Keys.InputFor(k, workerID)
	return Sent{RequestID: requestID, WorkerID: workerID, Input: in, Control: in, Output: t.Keys.OutputFor(k, workerID), After: "0-0"}, nil
}

// control is where the task's cancel and permission replies go.
func (s Sent) control() string {
	if s.Control != "" {
		return s.Control
	}
	return s.Input
}

// createRunScript writes a run hash (field/value pairs) unless it exists.
var createRunScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
`)

// Cancel asks the worker to end the task, queued or running: its output
// is then cancelled (PROTOCOL.md, "Cancel"), unless it ended before.
func (t *Tasks) Cancel(ctx context.Context, s Sent, reason string) error {
	doc, err := protocol.NewCancel(s.RequestID, reason).Encode()
	if err != nil {
		return Errorf(protocol.CodeInvalidCommand, "cancel: %v", err)
	}
	r := streams{t.Redis, t.Wait}
	if err := r.send(ctx, s.control(), doc); err != nil {
		return redisError(err, "cancel %s", s.RequestID)
	}
	return nil
}

// Answer answers a permission request of the task (a worker with
// AGENT_APPROVAL): allow or deny the tool call, with a message the model
// reads when denied.
func (t *Tasks) Answer(ctx context.Context, s Sent, permissionID string, allow bool, message string) error {
	doc, err := protocol.NewPermissionReply(s.RequestID, permissionID, allow, message).Encode()
	if err != nil {
		return Errorf(protocol.CodeInvalidCommand, "answer: %v", err)
	}
	r := streams{t.Redis, t.Wait}
	if err := r.send(ctx, s.control(), doc); err != nil {
		return redisError(err, "answer %s of %s", permissionID, s.RequestID)
	}
	return nil
}

// Message steers the running task: text the agent reads as a user
// message of the task's session while it works (PROTOCOL.md, "Message").
func (t *Tasks) Message(ctx context.Context, s Sent, text string) error {
	m := protocol.NewMessage(s.RequestID, text)
	if err := m.Validate(); err != nil {
		return Errorf(protocol.CodeInvalidCommand, "message: %v", err)
	}
	doc, err := m.Encode()
	if err != nil {
		return Errorf(protocol.CodeInvalidCommand, "message: %v", err)
	}
	r := streams{t.Redis, t.Wait}
	if err := r.send(ctx, s.control(), doc); err != nil {
		return redisError(err, "message to %s", s.RequestID)
	}
	return nil
}

// Watch calls fn with each progress event and permission request of the
// task and then with its output, and returns nil after the output. It returns ErrAwaitTimeout
// when ctx's deadline passes first, ctx.Err() when ctx is cancelled, and
// a Redis error as such.
func (t *Tasks) Watch(ctx context.Context, s Sent, fn func(Event)) error {
	r := streams{c: t.Redis}
	last := s.After
	if last == "" {
		last = "0-0"
	}
	for {
		if err := ctx.Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("task %s: %w", s.RequestID, ErrAwaitTimeout)
			}
			return err
		}
		block := time.Second
		if d, ok := ctx.Deadline(); ok && time.Until(d) < block {
			block = max(time.Until(d), time.Millisecond)
		}
		// The read's own context outlives ctx's deadline by a little, so
		// that a read blocking until then ends on its BLOCK, not as an
		// error of the connection.
		res, err := r.read(context.WithoutCancel(ctx), []string{s.Output, last}, block, 100)
		if err != nil {
			return redisError(err, "await %s", s.RequestID)
		}
		for _, st := range res {
			for _, m := range st.Messages {
				last = m.ID
				ev := DecodeEvent(s.Output, m)
				switch {
				case ev.Progress != nil && ev.Progress.RequestID == s.RequestID,
					ev.Permission != nil && ev.Permission.RequestID == s.RequestID:
					fn(ev)
				case ev.Output != nil && ev.Output.RequestID == s.RequestID:
					fn(ev)
					return nil
				}
			}
		}
	}
}

// Await returns the task's output (whatever its status: complete, blocked
// or failed), calling onProgress, when not nil, with each progress event
// before it. Errors are Watch's.
func (t *Tasks) Await(ctx context.Context, s Sent, onProgress func(protocol.Progress)) (protocol.Output, error) {
	var out protocol.Output
	err := t.Watch(ctx, s, func(ev Event) {
		switch {
		case ev.Output != nil:
			out = *ev.Output
		case ev.Progress != nil && onProgress != nil:
			onProgress(*ev.Progress)
		}
	})
	return out, err
}

// Run sends the task and awaits its output.
func (t *Tasks) Run(ctx context.Context, workerID string, task protocol.Task, onProgress func(protocol.Progress)) (protocol.Output, error) {
	s, err := t.Send(ctx, workerID, task)
	if err != nil {
		return protocol.Output{}, err
	}
	return t.Await(ctx, s, onProgress)
}
