package worker

import (
	"log/slog"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// Steering messages (`message` documents) ride on the input like cancels
// and are seen the same three ways (input.go); each entry counts once, by
// its id. A message for the running task goes into its turn when the task
// runs in the persistent process (a user message on its input);
// otherwise it waits, and the task's session gets it as its next turn
// right after the current one ends (steerTurns, agentrun.go), when its
// agent can resume a session here. A message for a task not started yet
// waits for it.

// steering is the messages seen, and those that wait for their task.
type steering struct {
	state    *workerState
	pub      *publisher
	log      *slog.Logger
	now      func() time.Time
	noResume string // why the agent takes no next turn (Capabilities.NoResume)

	mu      sync.Mutex // guards the fields below
	seen    map[string]cancelNote
	waiting map[string][]string // messages for tasks not started yet, by request id
}

// taskSteer is a task's messages, and the persistent process they go to
// while the task's turn runs there.
type taskSteer struct {
	mu     sync.Mutex // guards the fields below
	inject func(text string) error
	// answer is the process's AnswerPermission (approve.go).
	answer func(ask agent.PermissionAsk, allow bool, message string) error
	queue  []string // messages for the next turn
}

// attach makes the process proc take the task's messages and answers.
func (s *taskSteer) attach(proc *agent.Persistent) {
	s.mu.Lock()
	s.inject, s.answer = proc.Inject, proc.AnswerPermission
	s.mu.Unlock()
}

func (s *taskSteer) detach() {
	s.mu.Lock()
	s.inject, s.answer = nil, nil
	s.mu.Unlock()
}

func (s *taskSteer) answerer() func(agent.PermissionAsk, bool, string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answer
}

// take empties the queue of messages for the next turn.
func (s *taskSteer) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	msgs := s.queue
	s.queue = nil
	return msgs
}

func (s *taskSteer) enqueue(texts ...string) {
	s.mu.Lock()
	s.queue = append(s.queue, texts...)
	s.mu.Unlock()
}

// deliver puts a message into the running turn, or queues it for the
// next. It says whether a process was there to take it, and whether it
// took it.
func (s *taskSteer) deliver(text string) (attached, injected bool) {
	s.mu.Lock()
	inject := s.inject
	if inject == nil {
		s.queue = append(s.queue, text)
	}
	s.mu.Unlock()
	if inject == nil {
		return false, false
	}
	if err := inject(text); err != nil {
		s.enqueue(text)
		return true, false
	}
	return true, true
}

// note takes a steering message, once per entry.
func (s *steering) note(entryID string, m protocol.Message) {
	now := s.now()
	s.mu.Lock()
	if s.seen == nil {
		s.seen, s.waiting = map[string]cancelNote{}, map[string][]string{}
	}
	if _, seen := s.seen[entryID]; seen {
		s.mu.Unlock()
		return
	}
	if len(s.seen) >= maxCancelNotes {
		for id, n := range s.seen {
			if now.Sub(n.at) > cancelNoteTTL {
				delete(s.seen, id)
				delete(s.waiting, n.reason)
			}
		}
	}
	s.seen[entryID] = cancelNote{reason: m.RequestID, at: now}
	// Under mu: a task that starts meanwhile takes what waits (take).
	cur := s.state.currentOf(m.RequestID)
	if cur == nil {
		if len(s.waiting[m.RequestID]) < 100 {
			s.waiting[m.RequestID] = append(s.waiting[m.RequestID], m.Text)
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	how := "queued for the task's next turn"
	switch attached, injected := cur.steer.deliver(m.Text); {
	case injected:
		how = "delivered into the running turn"
	case !attached && s.noResume != "":
		how = "not delivered: " + s.noResume
	}
	s.log.Info("steering message", "request_id", m.RequestID, "how", how)
	s.pub.progress(cur, "message "+how, "")
}

// take gives cur the messages sent for it before it started.
func (s *steering) take(cur *current) {
	s.mu.Lock()
	msgs := s.waiting[cur.task.RequestID]
	delete(s.waiting, cur.task.RequestID)
	s.mu.Unlock()
	if len(msgs) > 0 {
		cur.steer.enqueue(msgs...)
	}
}
