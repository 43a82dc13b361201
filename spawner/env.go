package spawner

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
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
	fleet *Fleet
}

// Host returns this manager's host id (see Fleet.Host).
func (e *env) Host() string { return e.fleet.Host() }

// writeStatus sets fields of a worker of this host's status hash; a
// failure is logged, not returned: the status hash is a view, the truth
// is in the engine and the workers set.
func (e *env) writeStatus(ctx context.Context, id string, fields map[string]any) {
	e.writeStatusOn(ctx, e.Host(), id, fields)
}

// writeStatusOn is writeStatus for a worker of the given host.
func (e *env) writeStatusOn(ctx context.Context, host, id string, fields map[string]any) {
	if err := e.rdb.WriteStatus(ctx, id, host, e.now(), fields); err != nil {
		e.log.Warn("status not written", "worker_id", id, "err", err)
	}
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
