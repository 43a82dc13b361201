package rdb

import (
	"context"
	"fmt"
	"strconv"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/redis/go-redis/v9"
)

// Runs is what a task's admission reads before it runs: its run hash,
// how often its entry was delivered, and the run a task answers.
type Runs interface {
	RunRecord(ctx context.Context, requestID string) (RunRecord, error)
	RunState(ctx context.Context, requestID string) (protocol.RunState, error)
	DeliveryCount(ctx context.Context, stream, group, id string) (int64, error)
	Answered(ctx context.Context, requestID string) (AnsweredRun, error)
}

// runCmds implements Runs over the shared connection.
type runCmds struct{ *core }

var _ Runs = (*runCmds)(nil)

// AnsweredRun is what a task that answers a run needs of it.
type AnsweredRun struct {
	Found     bool // the run hash exists
	Terminal  bool
	ProjectID string
	SessionID string
}

// Answered reads the project and session of the run requestID.
func (r *runCmds) Answered(ctx context.Context, requestID string) (AnsweredRun, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	vals, err := r.c.HMGet(ctx, r.Keys.Run(requestID), protocol.RunFieldStatus, protocol.RunFieldProjectID, protocol.RunFieldSessionID).Result()
	if err != nil {
		return AnsweredRun{}, fmt.Errorf("rdb: read run %s: %w", requestID, err)
	}
	if len(vals) != 3 { // a reply a failover cut short
		return AnsweredRun{}, fmt.Errorf("rdb: read run %s: %d fields in the reply, want 3", requestID, len(vals))
	}
	str := func(v any) string { s, _ := v.(string); return s }
	a := AnsweredRun{ProjectID: str(vals[1]), SessionID: str(vals[2])}
	status := protocol.RunState(str(vals[0]))
	a.Found, a.Terminal = status != "", status.Terminal()
	return a, nil
}

// DeliveryCount returns how many times the entry has been delivered (1 for
// the first), or 0 when it is not pending.
func (r *runCmds) DeliveryCount(ctx context.Context, stream, group, id string) (int64, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	res, err := r.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: id, End: id, Count: 1}).Result()
	if err != nil || len(res) == 0 {
		return 0, err
	}
	return res[0].RetryCount, nil
}

// RunState returns the state of a run, or "" when the run is unknown.
func (r *runCmds) RunState(ctx context.Context, requestID string) (protocol.RunState, error) {
	rec, err := r.RunRecord(ctx, requestID)
	return rec.State, err
}

// RunRecord is what the wrapper reads of a run hash before it starts a task.
type RunRecord struct {
	State    protocol.RunState // "" when the run is unknown
	Requeues int64             // protocol.RunFieldAttempts: hand-overs by the spawner
	// Attempt is the last attempt a wrapper ran (protocol.RunFieldAttempt;
	// 0 for none): it counts the wrapper's own retries too.
	Attempt int64
}

// RunRecord reads the state of a run and how often the spawner requeued it.
func (r *runCmds) RunRecord(ctx context.Context, requestID string) (RunRecord, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	vals, err := r.c.HMGet(ctx, r.Keys.Run(requestID), protocol.RunFieldStatus, protocol.RunFieldAttempts, protocol.RunFieldAttempt).Result()
	if err != nil {
		return RunRecord{}, fmt.Errorf("rdb: read run %s: %w", requestID, err)
	}
	if len(vals) != 3 { // a reply a failover cut short
		return RunRecord{}, fmt.Errorf("rdb: read run %s: %d fields in the reply, want 3", requestID, len(vals))
	}
	var rec RunRecord
	if s, ok := vals[0].(string); ok {
		rec.State = protocol.RunState(s)
	}
	if s, ok := vals[1].(string); ok {
		rec.Requeues, _ = strconv.ParseInt(s, 10, 64)
	}
	if s, ok := vals[2].(string); ok {
		rec.Attempt, _ = strconv.ParseInt(s, 10, 64)
	}
	return rec, nil
}
