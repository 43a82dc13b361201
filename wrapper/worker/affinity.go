package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// Session affinity on the developer queue. A project's session stays
// bound to the developer worker that holds it (SESSION_AFFINITY after
// its last task; protocol.Affinity). Any developer worker may read the
// project's next task from the queue; when another one holds the
// project's session and is free (idle, not degraded, its heartbeat
// fresh: it is in the developer idle set), the reader hands the task to
// it (the entry becomes that worker's pending entry, in one script), and
// the holder, which reads its own pending entries first on each turn of
// its loop, resumes the session. A holder that is busy, degraded or gone
// does not get it: the reader runs the task itself (in a new session).

// affinity gives a task read from the developer queue to the worker that
// holds its project's session, when that one is free.
type affinity struct {
	rdb       rdb.Affinity
	keys      protocol.Keys
	workerID  string
	agentType protocol.AgentType
	// on: a developer worker whose session policy keeps sessions.
	on bool
	// fresh is how old a holder's place in the idle set may be.
	fresh time.Duration
	pub   *publisher
	log   *slog.Logger
	now   func() time.Time
}

// handOff gives a task read from the developer queue to the worker that
// holds its project's session, if that one is free; it reports whether it
// did (the task is then that worker's, and nothing more is done here).
func (w *affinity) handOff(ctx context.Context, src taskSource, task protocol.Task) bool {
	if !w.on || src.own || task.Answers != "" || task.ForceNewSession {
		return false
	}
	fields, err := w.rdb.SessionFields(ctx, w.agentType, task.Project())
	if err != nil {
		return false
	}
	now := w.now()
	holder, ok := protocol.Affinity(fields, now)
	if !ok || holder == w.workerID {
		return false
	}
	handed, err := w.rdb.HandOff(ctx, src.stream, w.keys.DeveloperIdle(), src.group, holder, src.entryID, now.Add(-w.fresh))
	if err != nil {
		w.log.Warn("hand-off to the session's worker failed; running the task here", "request_id", task.RequestID, "to", holder, "err", err)
		return false
	}
	if !handed {
		return false
	}
	w.log.Info("task handed to the worker that holds its project's session", "request_id", task.RequestID, "project_id", task.Project(), "to", holder)
	w.pub.lifecycle(protocol.EventHandedOff, task.RequestID, task.TaskID, map[string]any{"to": holder, "project_id": task.Project()})
	return true
}
