package worker

import (
	"context"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Steering messages (`message` documents) ride on the input like cancels
// and are seen the same three ways (cancel.go); each entry counts once,
// by its id. A message for the running task goes into its turn when the
// task runs in the persistent Claude process (a user message on its
// stream-json input); otherwise it waits, and the task's session gets it
// as its next turn right after the current one ends (steerTurns). A
// message for a task not started yet waits for it.

// steering is the task in flight's messages; guarded by Worker.mu.
type steering struct {
	inject func(text string) error // the persistent process's Inject while the task's turn runs; nil otherwise
	// answer is the persistent process's AnswerPermission while the
	// task's turn runs (approve.go).
	answer func(ask agent.PermissionAsk, allow bool, message string) error
	queue  []string // messages for the next turn
}

// noteMessage takes a steering message, once per entry.
func (w *Worker) noteMessage(entryID string, m protocol.Message) {
	now := w.now()
	w.mu.Lock()
	if w.seenMessages == nil {
		w.seenMessages, w.messages = map[string]cancelNote{}, map[string][]string{}
	}
	if _, seen := w.seenMessages[entryID]; seen {
		w.mu.Unlock()
		return
	}
	if len(w.seenMessages) >= maxCancelNotes {
		for id, n := range w.seenMessages {
			if now.Sub(n.at) > cancelNoteTTL {
				delete(w.seenMessages, id)
				delete(w.messages, n.reason)
			}
		}
	}
	w.seenMessages[entryID] = cancelNote{reason: m.RequestID, at: now}
	cur := w.cur
	if cur == nil || cur.task.RequestID != m.RequestID {
		if len(w.messages[m.RequestID]) < 100 {
			w.messages[m.RequestID] = append(w.messages[m.RequestID], m.Text)
		}
		w.mu.Unlock()
		return
	}
	inject := cur.steer.inject
	if inject == nil {
		cur.steer.queue = append(cur.steer.queue, m.Text)
	}
	w.mu.Unlock()
	how := "queued for the task's next turn"
	if inject != nil {
		if err := inject(m.Text); err != nil {
			w.mu.Lock()
			cur.steer.queue = append(cur.steer.queue, m.Text)
			w.mu.Unlock()
		} else {
			how = "delivered into the running turn"
		}
	}
	if why := w.agent.Caps().NoResume; why != "" && inject == nil {
		how = "not delivered: " + why
	}
	w.log.Info("steering message", "request_id", m.RequestID, "how", how)
	w.pushProgress(cur, "message "+how, nil, "", "")
}

// takeMessagesLocked gives cur the messages sent for it before it
// started. The caller holds Worker.mu.
func (w *Worker) takeMessagesLocked(cur *current) {
	if msgs := w.messages[cur.task.RequestID]; len(msgs) > 0 {
		cur.steer.queue = append(cur.steer.queue, msgs...)
		delete(w.messages, cur.task.RequestID)
	}
}

// handleMessageEntry takes a message document read through the group in
// its turn: noted (once), acknowledged.
func (w *Worker) handleMessageEntry(src taskSource, e *rdb.Entry, data []byte) {
	m, err := protocol.DecodeMessage(data)
	if err != nil {
		w.reject(src, data, err)
		return
	}
	w.noteMessage(e.ID, m)
	_, _ = store(w.pub, "ack "+e.ID, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, w.rdb.Ack(ctx, src.stream, src.group, e.ID)
	})
	w.requestPause(m.RequestID, "", "message_read")
}

// steerTurns runs the messages that came while the task's turn ran (and
// could not go into it) as further turns of its session, right after it,
// while the turns end well and no cancel came. The outcome is the last
// turn's, with the usage of all. Only for an agent that can resume a
// session here (Capabilities.NoResume).
func (w *Worker) steerTurns(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec, o agent.Outcome) agent.Outcome {
	if w.agent.Caps().NoResume != "" {
		return o
	}
	for {
		w.mu.Lock()
		msgs := cur.steer.queue
		cur.steer.queue = nil
		w.mu.Unlock()
		if len(msgs) == 0 || o.Result == nil || o.Result.IsError || o.Interrupted || o.Result.SessionID == "" || ctx.Err() != nil {
			return o
		}
		next := task
		next.Prompt = strings.Join(msgs, "\n\n")
		p := plan
		p.ResumeID = o.Result.SessionID
		inv := invocationFor(w.agent, next, p)
		s := spec
		s.Argv, s.Stdin, s.OnStart = w.agent.Argv(inv), w.agent.Stdin(inv), nil
		w.pushProgress(cur, "message: running it as the next turn of the task's session", nil, "", "")
		o = mergeTurns(o, w.runAgent(ctx, next, p, cur, s))
	}
}

// mergeTurns is the outcome of two turns of one task: the second's, with
// the usage, cost and time of both.
func mergeTurns(a, b agent.Outcome) agent.Outcome {
	b.Duration += a.Duration
	if b.Result == nil {
		b.EarlierTurns = b.EarlierTurns.Add(a.Result.Usage)
		return b
	}
	r := *b.Result
	r.Usage, r.CostUSD = r.Usage.Add(a.Result.Usage), r.CostUSD+a.Result.CostUSD
	b.Result = &r
	return b
}
