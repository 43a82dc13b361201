package spawner

import (
	"context"
	"time"
)

// Gone answers the tasks sent to a long-lived worker after it was retired
// under its id (deleted, or dead and not replaced under it): each gets a
// failed Output WORKER_GONE within an interval, once, until the worker's
// retention ends. Without it such a task would stay in a stream nobody
// reads. It runs on the fleet's leader.
type Gone struct {
	job
	*env
	workers   goneAnswerer
	interval  time.Duration // how often every retired worker's input is looked at
	retention time.Duration // RETENTION: how long a retired worker is answered for
}

// goneAnswerer answers the tasks of one retired worker (answers.answerGone).
type goneAnswerer interface {
	answerGone(ctx context.Context, id string) (int, error)
}

func newGone(e *env, w goneAnswerer, interval, retention time.Duration) *Gone {
	return &Gone{env: e, workers: w, interval: interval, retention: retention}
}

// Start answers until Stop.
func (g *Gone) Start(ctx context.Context) { g.start(ctx, g.run) }

func (g *Gone) run(ctx context.Context) {
	every(ctx, g.interval, func(ctx context.Context) { g.once(ctx) })
}

// once looks at every retired worker's input once and returns how many
// tasks it answered.
func (g *Gone) once(ctx context.Context) int {
	ids, err := g.rdb.Retired(ctx, g.now().Add(-g.retention))
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("retired workers not read", "err", err)
		}
		return 0
	}
	total := 0
	for _, id := range ids {
		n, err := g.workers.answerGone(ctx, id)
		if err != nil && ctx.Err() == nil {
			g.log.Warn("tasks sent to a retired worker not answered", "worker_id", id, "err", err)
		}
		if n > 0 {
			g.log.Info("tasks sent to a retired worker answered WORKER_GONE", "worker_id", id, "tasks", n)
		}
		total += n
	}
	return total
}
