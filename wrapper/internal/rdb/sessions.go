package rdb

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Sessions is what the session policy keeps in Redis: a project's
// session record (claimed, saved), its stored context, and the session's
// files.
type Sessions interface {
	ClaimSession(ctx context.Context, agent protocol.AgentType, project, workerID string, now, expires time.Time) (SessionRecord, error)
	SaveSession(ctx context.Context, agent protocol.AgentType, project, workerID string, newSession bool, costUSD float64, fields map[string]any) (bool, error)
	ProjectContext(ctx context.Context, project string) (string, error)
	SetProjectContext(ctx context.Context, project, text string) error
	SaveSessionFiles(ctx context.Context, agent protocol.AgentType, project string, blob []byte, ttl time.Duration) error
	SessionFiles(ctx context.Context, agent protocol.AgentType, project string) ([]byte, error)
}

// sessionCmds implements Sessions over the shared connection.
type sessionCmds struct{ *core }

var _ Sessions = (*sessionCmds)(nil)

// claimScript reads a project's session record and, unless another worker
// holds it with an unexpired affinity, makes this worker its holder.
//
// KEYS[1] session hash; ARGV[1] worker id, ARGV[2] now (unix ms),
// ARGV[3] affinity expiry (unix ms). Returns {claimed (0/1), field, value, ...}.
var claimScript = redis.NewScript(`
local holder = redis.call('HGET', KEYS[1], 'worker_id')
local expires = tonumber(redis.call('HGET', KEYS[1], 'worker_expires_at_ms') or '0')
local claimed = 0
if (not holder) or holder == '' or holder == ARGV[1] or expires <= tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'worker_id', ARGV[1], 'worker_expires_at_ms', ARGV[3])
  claimed = 1
end
local out = {claimed}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all do out[#out + 1] = all[i] end
return out
`)

// SessionRecord is a project's session as stored.
type SessionRecord struct {
	Fields  map[string]string // every field of the hash (empty when none)
	Claimed bool              // this worker holds the session now
}

// ClaimSession reads a project's session and claims it for workerID until
// expires, unless another worker holds it.
func (r *sessionCmds) ClaimSession(ctx context.Context, agent protocol.AgentType, project, workerID string, now, expires time.Time) (SessionRecord, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	res, err := claimScript.Run(ctx, r.c, []string{r.Keys.Session(agent, project)}, workerID, now.UnixMilli(), expires.UnixMilli()).Slice()
	if err != nil {
		return SessionRecord{}, fmt.Errorf("rdb: claim session of %s: %w", project, err)
	}
	if len(res) == 0 {
		return SessionRecord{}, fmt.Errorf("rdb: claim session of %s: an empty reply", project)
	}
	rec := SessionRecord{Fields: map[string]string{}}
	if n, ok := res[0].(int64); ok && n == 1 {
		rec.Claimed = true
	}
	for i := 1; i+1 < len(res); i += 2 {
		k, _ := res[i].(string)
		v, _ := res[i+1].(string)
		rec.Fields[k] = v
	}
	return rec, nil
}

// saveScript writes a session record only while this worker holds it, and
// counts one more task and its cost (from zero for a new session).
// KEYS[1] session hash; ARGV[1] worker id, ARGV[2] "1" for a new session,
// ARGV[3] the task's cost; ARGV[4...] field/value pairs.
var saveScript = redis.NewScript(`
local holder = redis.call('HGET', KEYS[1], 'worker_id')
if holder and holder ~= '' and holder ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then redis.call('HSET', KEYS[1], 'tasks', 0, 'cost_usd', 0) end
redis.call('HSET', KEYS[1], 'worker_id', ARGV[1], unpack(ARGV, 4))
redis.call('HINCRBY', KEYS[1], 'tasks', 1)
redis.call('HINCRBYFLOAT', KEYS[1], 'cost_usd', ARGV[3])
return 1
`)

// SaveSession writes fields of a project's session if workerID holds it
// (or nobody does), and counts the task and its cost; it returns false when
// another worker holds it.
func (r *sessionCmds) SaveSession(ctx context.Context, agent protocol.AgentType, project, workerID string, newSession bool, costUSD float64, fields map[string]any) (bool, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	reset := "0"
	if newSession {
		reset = "1"
	}
	args := []any{workerID, reset, strconv.FormatFloat(costUSD, 'f', -1, 64)}
	for k, v := range fields {
		args = append(args, k, v)
	}
	n, err := saveScript.Run(ctx, r.c, []string{r.Keys.Session(agent, project)}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("rdb: save session of %s: %w", project, err)
	}
	return n == 1, nil
}

// ProjectContext returns a project's stored context ("" when none).
func (r *sessionCmds) ProjectContext(ctx context.Context, project string) (string, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	s, err := r.c.Get(ctx, r.Keys.ProjectContext(project)).Result()
	if err == redis.Nil {
		return "", nil
	}
	return s, err
}

// SetProjectContext stores a project's context.
func (r *sessionCmds) SetProjectContext(ctx context.Context, project, text string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.Set(ctx, r.Keys.ProjectContext(project), text, 0).Err()
}

// Int64Field reads an integer field of a record ("" or garbage: 0).
func Int64Field(fields map[string]string, name string) int64 {
	n, _ := strconv.ParseInt(fields[name], 10, 64)
	return n
}

// SaveSessionFiles stores the project's session files blob for ttl.
func (r *sessionCmds) SaveSessionFiles(ctx context.Context, agent protocol.AgentType, project string, blob []byte, ttl time.Duration) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	return r.c.Set(ctx, r.Keys.SessionFiles(agent, project), blob, ttl).Err()
}

// SessionFiles returns the project's session files blob (nil: none).
func (r *sessionCmds) SessionFiles(ctx context.Context, agent protocol.AgentType, project string) ([]byte, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	b, err := r.c.Get(ctx, r.Keys.SessionFiles(agent, project)).Bytes()
	if err == redis.Nil {
		return nil, nil
	}
	return b, err
}
