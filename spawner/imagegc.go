package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"
)

// run is the image GC's loop, counting its collections.
func (g *gcJob) run(ctx context.Context) {
	interval := g.gc.Interval
	if interval <= 0 {
		interval = 24 * time.Hour
	}
	every(ctx, interval, func(ctx context.Context) {
		rep, err := g.gc.Collect(ctx)
		if err != nil {
			g.gc.Logger().Warn("image gc failed", "err", err)
		}
		if m := g.obs.m; m != nil {
			m.gcRuns.WithLabelValues(outcome(err)).Inc()
			m.gcRemoved.Add(float64(len(rep.Removed)))
		}
	})
}

// gcJob runs the image GC as a component.
type gcJob struct {
	job
	gc  *images.GC
	obs *observer
}

func (g *gcJob) Start(ctx context.Context) { g.start(ctx, g.run) }
