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
	s *Spawner
}

// Start serves requests until Stop.
func (c *Controls) Start(ctx context.Context) { c.start(ctx, c.run) }

// run serves the shared control stream and this host's own (requests
// other managers forwarded here); a request for a worker of another live
// host is forwarded there, one for a worker of a host that is not live
// is dropped (nothing can pause it).
func (c *Controls) run(ctx context.Context) {
	s := c.s
	own := s.keys.HostControl(s.Host())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.consume(ctx, own, c.serve(ctx, own))
	}()
	s.consume(ctx, s.keys.Control(), c.serve(ctx, s.keys.Control()))
	<-done
}

func (c *Controls) serve(ctx context.Context, stream string) func([]redis.XMessage) bool {
	s := c.s
	return func(msgs []redis.XMessage) bool {
		for _, msg := range msgs {
			data, _ := protocol.EntryData(msg.Values)
			if req, err := protocol.DecodeControl(data); err == nil {
				host, mine, err := s.owner(ctx, req.WorkerID)
				if err != nil {
					return false // not acknowledged: served again
				}
				if !mine {
					if live, err := s.hostLive(ctx, host); err == nil && live {
						if err := s.rdb.Forward(ctx, stream, s.keys.HostControl(host), protocol.ManagerGroup, msg.ID, data); err != nil {
							s.log.Warn("forward a control request", "worker_id", req.WorkerID, "host", host, "err", err)
							return false
						}
						continue
					}
				} else if err := s.Pause(ctx, req.WorkerID); IsBusy(err) {
					s.log.Info("pause request skipped", "worker_id", req.WorkerID, "why", err)
				} else if err != nil && !IsNotFound(err) {
					s.log.Warn("pause on request", "worker_id", req.WorkerID, "err", err)
					if ctx.Err() != nil {
						return false // not acknowledged: served again
					}
				}
			}
			if err := s.rdb.Ack(ctx, stream, protocol.ManagerGroup, msg.ID); err != nil {
				s.log.Warn("control request not acknowledged", "err", err)
			}
		}
		return true
	}
}
