package spawner

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Controls serves the wrappers' requests on the control stream (a pause
// once a worker is idle: the wrapper never pauses itself). The pause goes
// through Pause, which refuses a worker with a task in flight, held or
// waiting.
type Controls struct {
	job
	controlsParams
}

// controlsParams is what Controls is built from.
type controlsParams struct {
	*env
	consumer
	pause func(ctx context.Context, id string) error // Spawner.Pause
}

func newControls(p controlsParams) *Controls { return &Controls{controlsParams: p} }

// Start serves requests until Stop.
func (c *Controls) Start(ctx context.Context) { c.start(ctx, c.run) }

// run serves the shared control stream and this host's own (requests
// other managers forwarded here).
func (c *Controls) run(ctx context.Context) {
	own := c.keys.HostControl(c.Host())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.consume(ctx, own, c.serve(ctx, own))
	}()
	c.consume(ctx, c.keys.Control(), c.serve(ctx, c.keys.Control()))
	<-done
}

func (c *Controls) serve(ctx context.Context, stream string) func([]redis.XMessage) bool {
	return func(msgs []redis.XMessage) bool {
		for _, msg := range msgs {
			switch c.serveOne(ctx, stream, msg) {
			case entryRetry:
				return false // not acknowledged: served again
			case entryMoved:
				continue // acknowledged by the move
			}
			if err := c.rdb.Ack(ctx, stream, protocol.ManagerGroup, msg.ID); err != nil {
				c.log.Warn("control request not acknowledged", "err", err)
			}
		}
		return true
	}
}

// serveOne serves one request: a request for a worker of another live
// host is forwarded there, one for a worker of a host that is not live is
// dropped (nothing can pause it), one for a worker of this host pauses
// it.
func (c *Controls) serveOne(ctx context.Context, stream string, msg redis.XMessage) entryFate {
	data, _ := protocol.EntryData(msg.Values)
	req, err := protocol.DecodeControl(data)
	if err != nil {
		return entryDone
	}
	rt, err := c.fleet.Route(ctx, req.WorkerID)
	if err != nil {
		return entryRetry
	}
	switch {
	case rt.Elsewhere():
		if err := c.fleet.Forward(ctx, stream, c.keys.HostControl(rt.Host), msg.ID, data); err != nil {
			c.log.Warn("forward a control request", "worker_id", req.WorkerID, "host", rt.Host, "err", err)
			return entryRetry
		}
		return entryMoved
	case rt.Here:
		err := c.pause(ctx, req.WorkerID)
		switch {
		case IsBusy(err):
			c.log.Info("pause request skipped", "worker_id", req.WorkerID, "why", err)
		case err != nil && !IsNotFound(err):
			c.log.Warn("pause on request", "worker_id", req.WorkerID, "err", err)
			if ctx.Err() != nil {
				return entryRetry
			}
		}
	}
	return entryDone
}
