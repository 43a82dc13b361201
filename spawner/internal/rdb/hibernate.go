package rdb

import (
	"context"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// Hibernation: a worker leaves Workers for Retiring (BeginRetire, so one
// caller does it and nothing judges it meanwhile), its container goes,
// then it leaves Retiring for its host's hibernated set (no slot). A
// wake takes it from that set into Workers, in one step with its admitted
// create's slot (WakeJoin); a delete takes it out (Unhibernate). Whoever
// removes it from the set first wins.
type Hibernation interface {
	Hibernate(ctx context.Context, id, host string) (bool, error)
	NoteHibernatedHost(ctx context.Context, host string) error
	HibernatedOn(ctx context.Context, host string) ([]string, error)
	IsHibernated(ctx context.Context, host, id string) (bool, error)
	Unhibernate(ctx context.Context, host, id string) (bool, error)
	WakeJoin(ctx context.Context, host, id string) (int, error)
	WakeIntoWarm(ctx context.Context, host, id, warm, pool string) (int, error)
	Adopt(ctx context.Context, lost, host string) ([]string, error)
	MoveHibernated(ctx context.Context, from, to, id string) (bool, error)
}

// hibernationCmds implements Hibernation over the shared connection.
type hibernationCmds struct{ *core }

var _ Hibernation = (*hibernationCmds)(nil)

// hibernateScript: KEYS retiring, host hibernated, status, heartbeat,
// placement, hosts with hibernated workers; ARGV id, host.
var hibernateScript = script(`
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[6], ARGV[2])
redis.call('HDEL', KEYS[3], '` + protocol.StatusFieldRetireReason + `', '` + protocol.StatusFieldRetiredAt + `')
redis.call('DEL', KEYS[4])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
`)

// Hibernate ends the caller's retirement of id as a hibernation on host;
// false when id was not being retired.
func (r *hibernationCmds) Hibernate(ctx context.Context, id, host string) (bool, error) {
	k := r.Keys
	n, err := hibernateScript.Run(ctx, r.c, []string{ctlplane.RetiringKey(k), ctlplane.HostHibernatedKey(k, host), k.Status(id), k.Heartbeat(id), k.Placement(),
		k.HibernatedHosts()}, id, host).Int()
	return n == 1, err
}

// NoteHibernatedHost records host among the hosts with hibernated
// workers when it has some (its workers hibernated before the record
// existed are then listed as well).
func (r *hibernationCmds) NoteHibernatedHost(ctx context.Context, host string) error {
	n, err := r.c.SCard(ctx, ctlplane.HostHibernatedKey(r.Keys, host)).Result()
	if err != nil || n == 0 {
		return err
	}
	return r.c.SAdd(ctx, r.Keys.HibernatedHosts(), host).Err()
}

// HibernatedOn returns the hibernated workers of host.
func (r *hibernationCmds) HibernatedOn(ctx context.Context, host string) ([]string, error) {
	return r.c.SMembers(ctx, ctlplane.HostHibernatedKey(r.Keys, host)).Result()
}

// IsHibernated reports whether id is a hibernated worker of host.
func (r *hibernationCmds) IsHibernated(ctx context.Context, host, id string) (bool, error) {
	return r.c.SIsMember(ctx, ctlplane.HostHibernatedKey(r.Keys, host), id).Result()
}

// Unhibernate takes id out of host's hibernated set and reports whether
// this call did (a delete that wins over a wake).
func (r *hibernationCmds) Unhibernate(ctx context.Context, host, id string) (bool, error) {
	n, err := r.c.SRem(ctx, ctlplane.HostHibernatedKey(r.Keys, host), id).Result()
	return n == 1, err
}

// wakeJoinScript: KEYS host hibernated, creating, workers; ARGV id.
// Returns 1 when the woken worker joined Workers, 0 when it is no longer
// hibernated (a delete won), -1 when its admitted slot's lease was lost
// (it stays hibernated).
var wakeJoinScript = script(`
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return -1 end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
return 1
`)

// WakeJoin makes a woken worker of host a member of Workers in place of
// its admitted slot and its hibernation (see wakeJoinScript).
func (r *hibernationCmds) WakeJoin(ctx context.Context, host, id string) (int, error) {
	k := r.Keys
	return wakeJoinScript.Run(ctx, r.c, []string{ctlplane.HostHibernatedKey(k, host), ctlplane.CreatingKey(k), k.Workers()}, id).Int()
}

// takeWarmScript: KEYS host hibernated, workers, placement, pool
// members, host paused; ARGV woken id, warm id, host. The hibernated
// worker takes the warm worker's slot and place: 1 done, 0 the woken one
// is no longer hibernated (woken or deleted meanwhile), -1 the warm one is
// no longer a worker (retired meanwhile).
var takeWarmScript = script(`
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('SREM', KEYS[2], ARGV[2]) == 0 then return -1 end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('SREM', KEYS[4], ARGV[2])
redis.call('SREM', KEYS[5], ARGV[2])
return 1
`)

// WakeIntoWarm makes hibernated worker id of host a member of Workers in
// warm pool worker warm's place (its slot, its placement, its pool
// membership go); see takeWarmScript for the answer.
func (r *hibernationCmds) WakeIntoWarm(ctx context.Context, host, id, warm, pool string) (int, error) {
	k := r.Keys
	return takeWarmScript.Run(ctx, r.c, []string{ctlplane.HostHibernatedKey(k, host), k.Workers(), k.Placement(),
		ctlplane.PoolMembersKey(k, pool), ctlplane.HostPausedKey(k, host)}, id, warm, host).Int()
}

// adoptScript: KEYS lost host's hibernated set, this host's, the
// worker's status hash, hosts with hibernated workers; ARGV id, this
// host. Returns 1 when adopted now.
var adoptScript = script(`
if redis.call('SMOVE', KEYS[1], KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('HSET', KEYS[3], '` + protocol.StatusFieldHost + `', ARGV[2])
return 1
`)

// Adopt makes the hibernated workers of a lost host this host's, and
// returns those it adopted: the next task to each wakes it here (its
// session restored from the session store).
func (r *hibernationCmds) Adopt(ctx context.Context, lost, host string) ([]string, error) {
	ids, err := r.HibernatedOn(ctx, lost)
	if err != nil {
		return nil, err
	}
	var adopted []string
	for _, id := range ids {
		moved, err := r.MoveHibernated(ctx, lost, host, id)
		if err != nil {
			return adopted, err
		}
		if moved {
			adopted = append(adopted, id)
		}
	}
	return adopted, nil
}

// MoveHibernated makes a hibernated worker of host from one of host to
// (its status names to), and reports whether this call moved it.
func (r *hibernationCmds) MoveHibernated(ctx context.Context, from, to, id string) (bool, error) {
	k := r.Keys
	n, err := adoptScript.Run(ctx, r.c, []string{ctlplane.HostHibernatedKey(k, from), ctlplane.HostHibernatedKey(k, to), k.Status(id), k.HibernatedHosts()}, id, to).Int()
	return n == 1, err
}
