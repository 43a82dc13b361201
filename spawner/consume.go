package spawner

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// entryFate is what becomes of a stream entry a component served.
type entryFate int

const (
	entryDone  entryFate = iota // served: acknowledge it
	entryMoved                  // moved to another stream, which acknowledged it here
	entryRetry                  // not acknowledged: served again
)

// consumer reads the streams of the managers group as one manager
// (managerID) of it.
type consumer struct {
	e         *env
	managerID string
	leaseTTL  time.Duration
}

// consume reads a stream of the managers group and hands each batch to
// handle until ctx ends or handle returns false: first this manager's own
// pending entries (left by an earlier run under the same MANAGER_ID), once
// and in order; then, every third of a lease, the entries another manager
// left pending longer than a lease (it died), whatever its name; and new
// entries in between.
func (c consumer) consume(ctx context.Context, stream string, handle func([]redis.XMessage) bool) {
	s, group, me := c.e, protocol.ManagerGroup, c.managerID
	retry := newRetry()
	after := "0"
	for ctx.Err() == nil {
		msgs, err := s.rdb.ReadOwn(ctx, stream, group, me, after, 16)
		if err != nil {
			s.log.Warn("read own pending entries", "stream", stream, "err", err)
			sleepCtx(ctx, retry.NextBackOff())
			continue
		}
		if len(msgs) == 0 {
			break
		}
		after = msgs[len(msgs)-1].ID
		if !handle(msgs) {
			return
		}
	}
	lastClaim := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastClaim) > c.leaseTTL/3 {
			lastClaim = time.Now()
			msgs, err := s.rdb.Claim(ctx, stream, group, me, c.leaseTTL, 16)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("claim entries of dead managers", "stream", stream, "err", err)
			}
			if err == nil && len(msgs) > 0 {
				s.log.Info("claimed entries a dead manager left pending", "stream", stream, "count", len(msgs))
				if !handle(msgs) {
					return
				}
			}
		}
		msgs, err := s.rdb.ReadNew(ctx, stream, group, me, 16, min(2*time.Second, c.leaseTTL/3))
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("read entries", "stream", stream, "err", err)
				sleepCtx(ctx, retry.NextBackOff())
			}
			continue
		}
		retry.Reset()
		if !handle(msgs) {
			return
		}
	}
}
