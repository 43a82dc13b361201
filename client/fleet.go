package client

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Fleet reads the runtime's state as the managers and workers keep it in
// Redis (PROTOCOL.md, "Keys"): the workers and their status, the
// projects' usage and budgets, the entries of a stream. It only reads;
// what it returns is a snapshot.
type Fleet struct {
	Redis redis.Cmdable
	Keys  protocol.Keys
}

// WorkerStatus is a worker's status hash (protocol.StatusField* keys)
// and its last heartbeat, nil when it has none or it does not decode.
type WorkerStatus struct {
	ID        string
	Hash      map[string]string
	Heartbeat *protocol.Heartbeat
}

// Workers returns the ids of every worker, sorted: the members of the
// workers set (each with a container, or one being made) and the
// hibernated workers of every host that has had some (no container, the
// identity kept: a task wakes them).
func (f *Fleet) Workers(ctx context.Context) ([]string, error) {
	// One round trip for the sets, one more for the hibernated workers of
	// the hosts that have had some.
	first := f.Redis.Pipeline()
	workers := first.SMembers(ctx, f.Keys.Workers())
	hostsCmd := first.SMembers(ctx, f.Keys.HibernatedHosts())
	if _, err := first.Exec(ctx); err != nil {
		return nil, redisError(err, "workers")
	}
	ids, hosts := workers.Val(), hostsCmd.Val()
	if len(hosts) > 0 {
		pipe := f.Redis.Pipeline()
		sets := make([]*redis.StringSliceCmd, len(hosts))
		for i, h := range hosts {
			sets[i] = pipe.SMembers(ctx, f.Keys.Hibernated(h))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, redisError(err, "hibernated workers")
		}
		for _, s := range sets {
			ids = append(ids, s.Val()...)
		}
	}
	sort.Strings(ids)
	return slices.Compact(ids), nil
}

// Worker reads one worker's status; NOT_FOUND when it has none.
func (f *Fleet) Worker(ctx context.Context, id string) (WorkerStatus, error) {
	all, err := f.Statuses(ctx, []string{id})
	if err != nil {
		return WorkerStatus{}, err
	}
	if len(all) == 0 {
		return WorkerStatus{}, Errorf(protocol.CodeNotFound, "no worker %q", id)
	}
	return all[0], nil
}

// History reads a worker's last state and health transitions, newest
// first (at most protocol.MaxStatusHistory); an entry that does not
// decode is left out.
func (f *Fleet) History(ctx context.Context, id string) ([]protocol.TransitionRecord, error) {
	docs, err := f.Redis.LRange(ctx, f.Keys.StatusHistory(id), 0, protocol.MaxStatusHistory-1).Result()
	if err != nil {
		return nil, redisError(err, "history of %s", id)
	}
	out := make([]protocol.TransitionRecord, 0, len(docs))
	for _, d := range docs {
		if r, err := protocol.DecodeTransitionRecord([]byte(d)); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// Statuses reads the status of the given workers in one round trip,
// leaving out those without a status hash.
func (f *Fleet) Statuses(ctx context.Context, ids []string) ([]WorkerStatus, error) {
	pipe := f.Redis.Pipeline()
	hashes := make([]*redis.MapStringStringCmd, len(ids))
	beats := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		hashes[i] = pipe.HGetAll(ctx, f.Keys.Status(id))
		beats[i] = pipe.Get(ctx, f.Keys.Heartbeat(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, redisError(err, "status")
	}
	out := make([]WorkerStatus, 0, len(ids))
	for i, id := range ids {
		h := hashes[i].Val()
		if len(h) == 0 {
			continue
		}
		ws := WorkerStatus{ID: id, Hash: h}
		if doc, err := beats[i].Bytes(); err == nil {
			if hb, err := protocol.DecodeHeartbeat(doc); err == nil {
				ws.Heartbeat = &hb
			}
		}
		out = append(out, ws)
	}
	return out, nil
}

// UsageProjects returns up to limit projects that have usage counters
// (0: no limit), sorted.
func (f *Fleet) UsageProjects(ctx context.Context, limit int) ([]string, error) {
	return f.scanSuffixes(ctx, f.Keys.UsageProject(""), limit)
}

// BudgetProjects returns the projects that have a budget, sorted.
func (f *Fleet) BudgetProjects(ctx context.Context) ([]string, error) {
	return f.scanSuffixes(ctx, f.Keys.ProjectBudget(""), 0)
}

func (f *Fleet) scanSuffixes(ctx context.Context, prefix string, limit int) ([]string, error) {
	var out []string
	iter := f.Redis.Scan(ctx, 0, prefix+"*", 200).Iterator()
	for iter.Next(ctx) && (limit <= 0 || len(out) < limit) {
		out = append(out, strings.TrimPrefix(iter.Val(), prefix))
	}
	if err := iter.Err(); err != nil {
		return nil, redisError(err, "scan %s*", prefix)
	}
	sort.Strings(out)
	return out, nil
}

// ProjectUsage is what a project's tasks used (PROTOCOL.md, "Usage").
type ProjectUsage struct {
	ProjectID     string  `json:"project_id"`
	Tasks         int64   `json:"tasks"`
	Input         int64   `json:"input"`
	Output        int64   `json:"output"`
	CacheRead     int64   `json:"cache_read"`
	CacheCreation int64   `json:"cache_creation"`
	CostUSD       float64 `json:"cost_usd"`
}

// Usage reads a project's usage counters (zeros when it has none).
func (f *Fleet) Usage(ctx context.Context, project string) (ProjectUsage, error) {
	h, err := f.Redis.HGetAll(ctx, f.Keys.UsageProject(project)).Result()
	if err != nil {
		return ProjectUsage{}, redisError(err, "usage of %s", project)
	}
	n := func(field string) int64 { v, _ := strconv.ParseInt(h[field], 10, 64); return v }
	cost, _ := strconv.ParseFloat(h[protocol.UsageFieldCostUSD], 64)
	return ProjectUsage{ProjectID: project, Tasks: n(protocol.UsageFieldTasks), Input: n(protocol.UsageFieldInput),
		Output: n(protocol.UsageFieldOutput), CacheRead: n(protocol.UsageFieldCacheRead),
		CacheCreation: n(protocol.UsageFieldCacheCreation), CostUSD: cost}, nil
}

// ProjectBudget is a project's budget and what it has spent.
type ProjectBudget struct {
	ProjectID string  `json:"project_id"`
	LimitUSD  float64 `json:"limit_usd"`
	WarnUSD   float64 `json:"warn_usd"`
	SpentUSD  float64 `json:"spent_usd"`
}

// Budget reads a project's budget (zero limit: none) and its spending.
func (f *Fleet) Budget(ctx context.Context, project string) (ProjectBudget, error) {
	pipe := f.Redis.Pipeline()
	b := pipe.HMGet(ctx, f.Keys.ProjectBudget(project), protocol.BudgetFieldLimitUSD, protocol.BudgetFieldWarnUSD)
	spent := pipe.HGet(ctx, f.Keys.UsageProject(project), protocol.UsageFieldCostUSD)
	_, _ = pipe.Exec(ctx)
	if err := b.Err(); err != nil {
		return ProjectBudget{}, redisError(err, "budget of %s", project)
	}
	num := func(v any) float64 { s, _ := v.(string); x, _ := strconv.ParseFloat(s, 64); return x }
	r := ProjectBudget{ProjectID: project, LimitUSD: num(b.Val()[0]), WarnUSD: num(b.Val()[1])}
	r.SpentUSD, _ = strconv.ParseFloat(spent.Val(), 64) // none yet: 0
	return r, nil
}

// Entries decodes every entry a stream holds, oldest first.
func (f *Fleet) Entries(ctx context.Context, stream string) ([]Event, error) {
	msgs, err := f.Redis.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		return nil, redisError(err, "read %s", stream)
	}
	return decodeAll(stream, msgs), nil
}

// Recent decodes the last n entries of a stream, oldest first.
func (f *Fleet) Recent(ctx context.Context, stream string, n int64) ([]Event, error) {
	msgs, err := f.Redis.XRevRangeN(ctx, stream, "+", "-", n).Result()
	if err != nil {
		return nil, redisError(err, "read %s", stream)
	}
	for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
		msgs[i], msgs[j] = msgs[j], msgs[i]
	}
	return decodeAll(stream, msgs), nil
}

func decodeAll(stream string, msgs []redis.XMessage) []Event {
	out := make([]Event, len(msgs))
	for i, m := range msgs {
		out[i] = DecodeEvent(stream, m)
	}
	return out
}
