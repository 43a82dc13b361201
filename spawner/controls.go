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

func (c *Controls) run(ctx context.Context) {
	s := c.s
	s.consume(ctx, s.keys.Control(), func(msgs []redis.XMessage) bool {
		for _, msg := range msgs {
			data, _ := protocol.EntryData(msg.Values)
			if req, err := protocol.DecodeControl(data); err == nil {
				if err := s.Pause(ctx, req.WorkerID); IsBusy(err) {
					s.log.Info("pause request skipped", "worker_id", req.WorkerID, "why", err)
				} else if err != nil && !IsNotFound(err) {
					s.log.Warn("pause on request", "worker_id", req.WorkerID, "err", err)
					if ctx.Err() != nil {
						return false // not acknowledged: served again
					}
				}
			}
			if err := s.rdb.Ack(ctx, s.keys.Control(), protocol.ManagerGroup, msg.ID); err != nil {
				s.log.Warn("control request not acknowledged", "err", err)
			}
		}
		return true
	})
}
