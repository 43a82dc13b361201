package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/redis/go-redis/v9"
)

// Affinity is what a developer worker calls to give a task to the worker
// that holds its project's session: that session's record, and the
// hand-off.
type Affinity interface {
	SessionFields(ctx context.Context, agent protocol.AgentType, project string) (map[string]string, error)
	HandOff(ctx context.Context, stream, idle, group, to, id string, since time.Time) (bool, error)
}

// affinityCmds implements Affinity over the shared connection.
type affinityCmds struct{ *core }

var _ Affinity = (*affinityCmds)(nil)

// handOffScript gives an entry this consumer read to another consumer of
// its group, if that one is still in the idle set with a score (its last
// heartbeat while idle, unix ms) at least the minimum. The entry keeps
// its delivery count: the other consumer's read of its pending entries
// adds the one it would have had.
//
// KEYS[1] stream, KEYS[2] idle set; ARGV[1] group, ARGV[2] the other
// consumer, ARGV[3] entry id, ARGV[4] minimum score. Returns 1 when
// handed.
var handOffScript = redis.NewScript(`
local score = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[2]) or '0')
if score < tonumber(ARGV[4]) then return 0 end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
local count = math.max(tonumber(p[1][4]) - 1, 0)
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', count)
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`)

// HandOff gives the entry id of stream (read by this consumer through
// group) to consumer to, if to is in the idle set idle with a score of at
// least since; it reports whether it did.
func (r *affinityCmds) HandOff(ctx context.Context, stream, idle, group, to, id string, since time.Time) (bool, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	n, err := handOffScript.Run(ctx, r.c, []string{stream, idle}, group, to, id, since.UnixMilli()).Int()
	if err != nil {
		return false, fmt.Errorf("rdb: hand %s of %s to %s: %w", id, stream, to, err)
	}
	return n == 1, nil
}

// SessionFields returns every field of a project's session record (empty
// when there is none), without claiming it.
func (r *affinityCmds) SessionFields(ctx context.Context, agent protocol.AgentType, project string) (map[string]string, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.HGetAll(ctx, r.Keys.Session(agent, project)).Result()
}
