package spawner

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/fleet"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// env is what every part of a manager shares: the store, the key names,
// the clock, the log and this host's place in the fleet. A Spawner makes
// one; each component holds a pointer to it, so a clock set on the
// Spawner (tests) is the clock of every component.
type env struct {
	rdb   *rdb.RDB
	keys  protocol.Keys
	now   func() time.Time
	log   *slog.Logger
	fleet *fleet.View
}

// Host returns this manager's host id (see Fleet.Host).
func (e *env) Host() string { return e.fleet.Host() }

// writeStatus sets fields of a worker of this host's status hash; a
// failure is logged, not returned: the status hash is a view, the truth
// is in the engine and the workers set.
func (e *env) writeStatus(ctx context.Context, id string, fields map[string]any) {
	e.writeStatusOn(ctx, e.Host(), id, fields)
}

// writeStatusOn is writeStatus for a worker of the given host. A write
// that changes the worker's state (paused, woken, failed, stopped) is a
// transition of its state machine, published as the wrapper publishes
// its own (transition).
func (e *env) writeStatusOn(ctx context.Context, host, id string, fields map[string]any) {
	to, changes := fields[protocol.StatusFieldState].(string)
	var prev []string
	if changes {
		prev, _ = e.rdb.StatusValues(ctx, id, protocol.StatusFieldState, protocol.StatusFieldHealth, protocol.StatusFieldStateSince)
		fields[protocol.StatusFieldStateSince] = protocol.FormatTime(e.now())
	}
	if err := e.rdb.WriteStatus(ctx, id, host, e.now(), fields); err != nil {
		e.log.Warn("status not written", "worker_id", id, "err", err)
		return
	}
	if len(prev) == 3 && prev[0] != "" && prev[0] != to {
		e.transition(ctx, host, id, prev, protocol.WorkerState(to))
	}
}

// transition publishes a state change the spawner made: prev is the
// status hash's state, health and state_since before it.
func (e *env) transition(ctx context.Context, host, id string, prev []string, to protocol.WorkerState) {
	now := e.now()
	h := protocol.Health(prev[1])
	tr := protocol.WorkerTransition{From: protocol.WorkerState(prev[0]), To: to, FromHealth: h, ToHealth: h,
		Reason: "spawner: " + string(to), At: now}
	if since, err := protocol.ParseTime(prev[2]); err == nil && !since.IsZero() && now.After(since) {
		tr.InPrevious = now.Sub(since)
	}
	rec := tr.Record()
	if err := e.rdb.PushHistory(ctx, id, rec); err != nil {
		e.log.Warn("history not written", "worker_id", id, "err", err)
	}
	e.lifecycleOn(ctx, host, id, protocol.EventStateChanged, rec.Detail())
}

// lifecycle publishes an event of a worker of this host.
func (e *env) lifecycle(ctx context.Context, id string, ev protocol.Event, detail map[string]any) {
	e.lifecycleOn(ctx, e.Host(), id, ev, detail)
}

// lifecycleOn publishes an event of a worker of the given host.
func (e *env) lifecycleOn(ctx context.Context, host, id string, ev protocol.Event, detail map[string]any) {
	l := protocol.Lifecycle{WorkerID: id, Event: ev, Source: protocol.SourceSpawner, Timestamp: e.now(), Detail: detail, Host: host}
	if err := e.rdb.Lifecycle(ctx, l); err != nil {
		e.log.Warn("lifecycle event not written", "worker_id", id, "event", ev, "err", err)
	}
}
