package rdb

import (
	"context"
	"strconv"

	"github.com/agentvisor/agentvisor/protocol"
)

// Runs is the spawner's reads of run hashes (Keys.Run): what a run is,
// whether it ended, and which attempt it is on. Their writes are the
// wrapper's, and Tasks.Answer's for a run its worker cannot answer.
type Runs interface {
	Run(ctx context.Context, requestID string) (map[string]string, error)
	RunStatus(ctx context.Context, requestID string) (protocol.RunState, error)
	Attempts(ctx context.Context, requestID string) (int, error)
	LastAttempt(ctx context.Context, requestID string) (int, error)
}

// runCmds implements Runs over the shared connection.
type runCmds struct{ *core }

var _ Runs = (*runCmds)(nil)

// Run returns a run's hash (empty when none: never sent, or past its
// retention).
func (r *runCmds) Run(ctx context.Context, requestID string) (map[string]string, error) {
	return r.c.HGetAll(ctx, r.Keys.Run(requestID)).Result()
}

// RunStatus returns a run's state ("" when it has none).
func (r *runCmds) RunStatus(ctx context.Context, requestID string) (protocol.RunState, error) {
	st, err := r.c.HGet(ctx, r.Keys.Run(requestID), protocol.RunFieldStatus).Result()
	if Nil(err) {
		return "", nil
	}
	return protocol.RunState(st), err
}

// Attempts returns how many times a run was handed to another worker.
func (r *runCmds) Attempts(ctx context.Context, requestID string) (int, error) {
	n, err := r.c.HGet(ctx, r.Keys.Run(requestID), protocol.RunFieldAttempts).Int()
	if Nil(err) {
		return 0, nil
	}
	return n, err
}

// LastAttempt returns the attempt a run is on: the last one a wrapper
// ran (its own retries counted), or the hand-overs plus one when that is
// more.
func (r *runCmds) LastAttempt(ctx context.Context, requestID string) (int, error) {
	vals, err := r.c.HMGet(ctx, r.Keys.Run(requestID), protocol.RunFieldAttempts, protocol.RunFieldAttempt).Result()
	if err != nil {
		return 0, err
	}
	n := [2]int{}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			n[i], _ = strconv.Atoi(s)
		}
	}
	return max(n[0]+1, n[1]), nil
}
