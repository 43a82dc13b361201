package worker

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
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

// markIdle keeps a developer worker's place in the developer idle set:
// in it, scored with the time, while idle, not stopping and not
// degraded; out of it otherwise. Each heartbeat refreshes the score.
func (w *Worker) markIdle() {
	if w.cfg.Kind != protocol.KindDeveloper {
		return
	}
	s := w.state.snapshot()
	idle := s.state == protocol.WorkerIdle && !s.stopping && s.health != protocol.HealthDegraded
	key, id, at := w.cfg.Keys.DeveloperIdle(), w.cfg.WorkerID, w.now()
	w.pub.out.Push("idle set", func(ctx context.Context) error { return w.rdb.SetIdle(ctx, key, id, idle, at) })
}

// handOff gives a task read from the developer queue to the worker that
// holds its project's session, if that one is free; it reports whether it
// did (the task is then that worker's, and nothing more is done here).
func (w *Worker) handOff(ctx context.Context, src taskSource, task protocol.Task) bool {
	if w.cfg.Kind != protocol.KindDeveloper || src.own || task.Answers != "" || task.ForceNewSession || w.cfg.SessionPolicy == "new" {
		return false
	}
	fields, err := w.rdb.SessionFields(ctx, w.cfg.AgentType, task.Project())
	if err != nil {
		return false
	}
	now := w.now()
	holder, ok := protocol.Affinity(fields, now)
	if !ok || holder == w.cfg.WorkerID {
		return false
	}
	fresh := now.Add(-time.Duration(protocol.HeartbeatTTLIntervals) * w.cfg.HeartbeatInterval)
	handed, err := w.rdb.HandOff(ctx, src.stream, w.cfg.Keys.DeveloperIdle(), src.group, holder, src.entryID, fresh)
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
