package rdb

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Usage is what counts the model calls that belong to no task's output
// (a retiring session's summary, a cancelled agent's wind-down).
type Usage interface {
	AddUsage(ctx context.Context, u TaskUsage) error
}

// usageCmds implements Usage over the shared connection.
type usageCmds struct{ *core }

var _ Usage = (*usageCmds)(nil)

// addUsageScript adds a model call's usage outside any task to the usage
// counters: the project's and the worker's, and the session's while it
// exists (its counters expire a retention after its last task, and keep
// that expiry). The tasks count stays as it is.
//
// KEYS[1] project, KEYS[2] worker, KEYS[3] session (when known); ARGV[1]
// the cost field, ARGV[2] the cost, ARGV[3...] field/increment pairs.
var addUsageScript = redis.NewScript(`
for k = 1, #KEYS do
  if k < 3 or redis.call('EXISTS', KEYS[k]) == 1 then
    for i = 3, #ARGV, 2 do
      redis.call('HINCRBY', KEYS[k], ARGV[i], ARGV[i + 1])
    end
    redis.call('HINCRBYFLOAT', KEYS[k], ARGV[1], ARGV[2])
  end
end
return 1
`)

// AddUsage adds the usage and cost of model calls that belong to no task
// (the summary turn of a retiring session) to u's project, worker and
// session counters, without counting a task: every model call the wrapper
// makes the agent do is counted, and the project's budget sees it.
func (r *usageCmds) AddUsage(ctx context.Context, u TaskUsage) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	keys := []string{r.Keys.UsageProject(u.Project), r.Keys.UsageWorker(u.Worker)}
	if u.Session != "" {
		keys = append(keys, r.Keys.UsageSession(u.Session))
	}
	args := []any{protocol.UsageFieldCostUSD, strconv.FormatFloat(u.CostUSD, 'f', -1, 64),
		protocol.UsageFieldInput, u.Usage.Input, protocol.UsageFieldOutput, u.Usage.Output,
		protocol.UsageFieldCacheRead, u.Usage.CacheRead, protocol.UsageFieldCacheCreation, u.Usage.CacheCreation}
	if err := addUsageScript.Run(ctx, r.c, keys, args...).Err(); err != nil {
		return fmt.Errorf("rdb: add usage of project %s: %w", u.Project, err)
	}
	return nil
}
