package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Wake unpauses every paused worker that has a task waiting or held,
// every 50 ms: a new task wakes its worker within milliseconds, and a
// task that arrived while a pause was in flight is never stranded. It
// runs on the leader.
type Wake struct {
	job
	s *Spawner
}

// Start checks until Stop.
func (w *Wake) Start(ctx context.Context) { w.start(ctx, w.run) }

func (w *Wake) run(ctx context.Context) {
	s := w.s
	every(ctx, 50*time.Millisecond, func(ctx context.Context) {
		_ = s.eachOwnWorker(ctx, func(ctx context.Context, id string) {
			if st, _ := s.rdb.StatusField(ctx, id, protocol.StatusFieldContainer); st != string(protocol.ContainerPaused) {
				return
			}
			if b, err := s.busy(ctx, id); err != nil || b == rdb.NotBusy {
				return
			}
			start := time.Now()
			err := s.Unpause(ctx, id)
			s.obs.woken(start, err)
			if err != nil && !IsNotFound(err) {
				s.log.Warn("wake on input", "worker_id", id, "err", err)
			}
		})
	})
}
