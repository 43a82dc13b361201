package rdb

import (
	"context"
	"fmt"

	"github.com/agentvisor/agentvisor/protocol"
)

// AnsweredRun is what a task that answers a run needs of it.
type AnsweredRun struct {
	Found     bool // the run hash exists
	Terminal  bool
	ProjectID string
	SessionID string
}

// Answered reads the project and session of the run requestID.
func (r *RDB) Answered(ctx context.Context, requestID string) (AnsweredRun, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	vals, err := r.c.HMGet(ctx, r.Keys.Run(requestID), protocol.RunFieldStatus, protocol.RunFieldProjectID, protocol.RunFieldSessionID).Result()
	if err != nil {
		return AnsweredRun{}, fmt.Errorf("rdb: read run %s: %w", requestID, err)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	a := AnsweredRun{ProjectID: str(vals[1]), SessionID: str(vals[2])}
	status := protocol.RunState(str(vals[0]))
	a.Found, a.Terminal = status != "", status.Terminal()
	return a, nil
}
