package rdb

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// HostRegistry is the hosts of a fleet: every host renews its entry in
// Hosts (scored by the time until which it is live) and its hash; a
// worker's host is its entry in Placement. A command or control request
// for another host's worker is moved, in one script, from the shared
// stream to that host's own (Forward), and a lost host's stream is
// drained back into the shared one (Drain).
type HostRegistry interface {
	RenewHost(ctx context.Context, host string, now time.Time, ttl time.Duration, max int, labels map[string]string, engine string) error
	HostLiveUntil(ctx context.Context, host string) (time.Time, error)
	LeaveHosts(ctx context.Context, host string) error
	ForgetHost(ctx context.Context, host string) error
	MarkHostLost(ctx context.Context, host string, now time.Time) error
	Hosts(ctx context.Context) ([]HostInfo, error)
	Placements(ctx context.Context) (map[string]string, error)
	PlacementOf(ctx context.Context, id string) (string, error)
	WorkersPlaced(ctx context.Context) ([]string, map[string]string, error)
	Forward(ctx context.Context, from, to, group, id string, doc []byte) error
	Drain(ctx context.Context, hostStream, shared, group string) (int, error)
}

// hostCmds implements HostRegistry over the shared connection.
type hostCmds struct{ *core }

var _ HostRegistry = (*hostCmds)(nil)

// HostInfo is one host as the registry knows it.
type HostInfo struct {
	ID         string
	MaxWorkers int
	Labels     map[string]string
	Engine     string
	LiveUntil  time.Time
	LostAt     time.Time // zero unless another manager found it lost
}

// Live reports whether the host is live at now.
func (h HostInfo) Live(now time.Time) bool { return now.Before(h.LiveUntil) }

// RenewHost marks host live until now+ttl and writes its description;
// the mark of a loss is cleared.
func (r *hostCmds) RenewHost(ctx context.Context, host string, now time.Time, ttl time.Duration, max int, labels map[string]string, engine string) error {
	lb, _ := json.Marshal(labels)
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, r.Keys.Hosts(), redis.Z{Score: float64(ms(now.Add(ttl))), Member: host})
		p.HSet(ctx, ctlplane.HostKey(r.Keys, host), ctlplane.HostFieldMaxWorkers, max, ctlplane.HostFieldLabels, string(lb),
			ctlplane.HostFieldEngine, engine, ctlplane.HostFieldUpdatedAt, protocol.FormatTime(now))
		p.HDel(ctx, ctlplane.HostKey(r.Keys, host), ctlplane.HostFieldLostAt)
		return nil
	})
	return err
}

// HostLiveUntil returns until when a host is live (zero: not registered).
func (r *hostCmds) HostLiveUntil(ctx context.Context, host string) (time.Time, error) {
	score, err := r.c.ZScore(ctx, r.Keys.Hosts(), host).Result()
	if Nil(err) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(int64(score)), nil
}

// LeaveHosts takes host out of placement (its managers stopped cleanly).
func (r *hostCmds) LeaveHosts(ctx context.Context, host string) error {
	return r.c.ZRem(ctx, r.Keys.Hosts(), host).Err()
}

// ForgetHost removes a lost host that has nothing left.
func (r *hostCmds) ForgetHost(ctx context.Context, host string) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, r.Keys.Hosts(), host)
		p.Del(ctx, ctlplane.HostKey(r.Keys, host))
		return nil
	})
	return err
}

// MarkHostLost records when a host was found lost.
func (r *hostCmds) MarkHostLost(ctx context.Context, host string, now time.Time) error {
	return r.c.HSetNX(ctx, ctlplane.HostKey(r.Keys, host), ctlplane.HostFieldLostAt, protocol.FormatTime(now)).Err()
}

// Hosts returns every host of the registry, live or not.
func (r *hostCmds) Hosts(ctx context.Context) ([]HostInfo, error) {
	zs, err := r.c.ZRangeWithScores(ctx, r.Keys.Hosts(), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	pipe := r.c.Pipeline()
	hs := make([]*redis.MapStringStringCmd, len(zs))
	for i, z := range zs {
		hs[i] = pipe.HGetAll(ctx, ctlplane.HostKey(r.Keys, z.Member.(string)))
	}
	if len(zs) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]HostInfo, len(zs))
	for i, z := range zs {
		h := hs[i].Val()
		info := HostInfo{ID: z.Member.(string), LiveUntil: time.UnixMilli(int64(z.Score)), Engine: h[ctlplane.HostFieldEngine]}
		info.MaxWorkers, _ = strconv.Atoi(h[ctlplane.HostFieldMaxWorkers])
		_ = json.Unmarshal([]byte(h[ctlplane.HostFieldLabels]), &info.Labels)
		info.LostAt, _ = protocol.ParseTime(h[ctlplane.HostFieldLostAt])
		out[i] = info
	}
	return out, nil
}

// Placements returns worker id → host for every worker that holds a slot.
func (r *hostCmds) Placements(ctx context.Context) (map[string]string, error) {
	return r.c.HGetAll(ctx, r.Keys.Placement()).Result()
}

// PlacementOf returns the host of a worker ("" when it holds no slot).
func (r *hostCmds) PlacementOf(ctx context.Context, id string) (string, error) {
	h, err := r.c.HGet(ctx, r.Keys.Placement(), id).Result()
	if Nil(err) {
		return "", nil
	}
	return h, err
}

// WorkersPlaced returns the ids of the workers set and the placement hash
// (worker id → host), in one round trip.
func (r *hostCmds) WorkersPlaced(ctx context.Context) ([]string, map[string]string, error) {
	pipe := r.c.Pipeline()
	w := pipe.SMembers(ctx, r.Keys.Workers())
	p := pipe.HGetAll(ctx, r.Keys.Placement())
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, err
	}
	return w.Val(), p.Val(), nil
}

// forwardScript: KEYS from stream, to stream; ARGV group, entry id, the
// entry's document, maxlen. The entry is added to the other stream and
// acknowledged (and deleted) on its own, at once: it is in exactly one.
var forwardScript = script(`
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', '$DATA', ARGV[3])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
`)

// Forward moves an entry read through group from one stream to another.
func (r *hostCmds) Forward(ctx context.Context, from, to, group, id string, doc []byte) error {
	return forwardScript.Run(ctx, r.c, []string{from, to}, group, id, doc, r.StreamMaxLen).Err()
}

// drainScript: KEYS host stream, shared stream; ARGV group, count,
// maxlen. Up to count entries of a lost host's stream go: those its
// managers had not acknowledged (never delivered, or delivered and held)
// back to the shared stream, to be served there; those they had (served,
// answered: a command's reply is sent before its acknowledgement) are
// only deleted, so that nothing is served twice. Returns how many went.
var drainScript = script(`
$LESS
$DELIVERED
local last = delivered(KEYS[1], ARGV[1]) or '0-0'
local held = {}
local pok, pending = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], '-', '+', tonumber(ARGV[2]))
if pok then
  for _, p in ipairs(pending) do held[p[1]] = true end
end
local es = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', tonumber(ARGV[2]))
for _, e in ipairs(es) do
  if held[e[1]] or less(last, e[1]) then
    local f = e[2]
    for i = 1, #f, 2 do
      if f[i] == '$DATA' then
        redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', '$DATA', f[i + 1])
      end
    end
    pcall(redis.call, 'XACK', KEYS[1], ARGV[1], e[1])
  end
  redis.call('XDEL', KEYS[1], e[1])
end
return #es
`)

// Drain empties a lost host's stream: the entries its managers had not
// acknowledged go back to the shared one, the others are deleted.
func (r *hostCmds) Drain(ctx context.Context, hostStream, shared, group string) (int, error) {
	total := 0
	for {
		n, err := drainScript.Run(ctx, r.c, []string{hostStream, shared}, group, 100, r.StreamMaxLen).Int()
		if err != nil {
			return total, err
		}
		total += n
		if n < 100 {
			return total, nil
		}
	}
}
