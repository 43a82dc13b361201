package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// TrimInterval is how often the leader trims the input streams.
const TrimInterval = 30 * time.Second

// Retention keeps Redis flat over a long run: input streams are never
// trimmed by length (an unread task must never be dropped), so the leader
// trims from each worker's input, and from the developer queue, the
// entries their group delivered and that no worker holds any more. What
// the spawner and the wrappers write otherwise carries its own bound
// (approximate MAXLEN, expiry after a terminal state; PROTOCOL.md,
// Retention). It runs on the leader.
type Retention struct {
	job
	*env
}

func newRetention(e *env) *Retention { return &Retention{env: e} }

// Start trims until Stop.
func (r *Retention) Start(ctx context.Context) { r.start(ctx, r.run) }

func (r *Retention) run(ctx context.Context) {
	every(ctx, TrimInterval, func(ctx context.Context) { r.trimInputs(ctx) })
}

// trimInputs trims every input stream once and returns how many entries
// went.
func (s *Retention) trimInputs(ctx context.Context) int {
	n := 0
	for _, queue := range s.keys.DeveloperInputs() {
		k, err := s.rdb.TrimInput(ctx, queue, protocol.DeveloperGroup)
		if err != nil {
			s.log.Warn("trim a developer queue", "stream", queue, "err", err)
		}
		n += k
	}
	_ = s.eachWorker(ctx, func(ctx context.Context, id string) {
		k, err := s.rdb.TrimInput(ctx, s.keys.Input(id), protocol.WorkerGroup)
		if err != nil {
			s.log.Warn("trim an input stream", "worker_id", id, "err", err)
		}
		n += k
	})
	return n
}
