package rdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// ACL is the per-worker Redis users (Redis 6+ ACL). A worker connects as
// a user of its own that may run only the commands the wrapper uses, on
// only its own keys and the shared ones its kind must touch; the
// manager's credentials never enter a container. The user goes when the
// worker is retired.
type ACL interface {
	WorkerUserPrefix() string
	WorkerUser(id string) string
	WorkerACL(id string, scope UserScope) []string
	ACLSupported(ctx context.Context) (bool, error)
	SetWorkerUser(ctx context.Context, id, password string, scope UserScope) error
	CopyWorkerUser(ctx context.Context, from, to string, scope UserScope) error
	RestoreWorkerUsers(ctx context.Context) (int, error)
	DeleteWorkerUser(ctx context.Context, id string) error
	WorkerUsers(ctx context.Context) ([]string, error)
}

// aclCmds implements ACL over the shared connection.
type aclCmds struct{ *core }

var _ ACL = (*aclCmds)(nil)

// WorkerUserPrefix starts the name of every worker user of a key prefix.
func (r *aclCmds) WorkerUserPrefix() string { return "agentvisor:" + r.Keys.Prefix + ":" }

// WorkerUser is the name of a worker's Redis user.
func (r *aclCmds) WorkerUser(id string) string { return r.WorkerUserPrefix() + id }

// workerCommands are the commands a wrapper runs (directly or in its Lua
// scripts), and no other: no KEYS or SCAN (they list every key name), no
// CLIENT LIST or KILL, no CONFIG, no ACL, no FLUSH. XREAD is its follower
// of its input outside the group (the cancels, steering messages and
// permission replies of the task in flight).
var workerCommands = []string{
	"-@all", "+@connection", "-@dangerous", "+ping",
	"+xadd", "+xreadgroup", "+xread", "+xack", "+xgroup|create", "+xpending", "+xrange", "+xrevrange", "+xlen", "+xinfo|groups",
	"+xclaim", "+lpush", "+ltrim", "+zadd", "+zrem", "+zscore",
	"+hset", "+hget", "+hmget", "+hgetall", "+hdel", "+hincrby", "+hincrbyfloat", "+hexists",
	"+set", "+get", "+setex", "+del", "+exists", "+expire", "+pexpire", "+ttl", "+pttl",
	"+eval", "+evalsha", "+script|load", "+script|exists", "+multi", "+exec", "+discard",
}

// WorkerACL returns the ACL rules of a worker's user: its commands, and
// its keys (read and write unless marked): its status hash, history and
// heartbeat, its input and output streams (the developer queues' and
// their idle set for a developer worker), its usage counters, run hashes
// and session usage counters (keyed by request and agent session, which
// no worker owns alone), its project's session, stored session files,
// context and usage counters (every project's for a worker bound to none:
// UserScope), write only to the lifecycle and control streams, and read
// only its project's budget.
func (r *aclCmds) WorkerACL(id string, scope UserScope) []string {
	k := r.Keys
	project, budgets := scope.projectKeys(k)
	keys := []string{k.Status(id), k.StatusHistory(id), k.Heartbeat(id), k.Run("*"), k.UsageSession("*"), k.UsageWorker(id), k.OutputFor(scope.Kind, id)}
	keys = append(keys, k.InputsFor(scope.Kind, id)...)
	if scope.Kind == protocol.KindDeveloper {
		keys = append(keys, k.DeveloperIdle())
	}
	rules := append([]string{}, workerCommands...)
	rules = append(rules, "resetchannels")
	for _, key := range append(keys, project...) {
		rules = append(rules, "~"+key)
	}
	rules = append(rules, "%W~"+k.Lifecycle(), "%W~"+k.Control(), "%R~"+budgets)
	return rules
}

// ACLSupported reports whether this Redis has ACLs the manager may use
// (Redis 6+, and a manager user allowed to manage users).
func (r *aclCmds) ACLSupported(ctx context.Context) (bool, error) {
	err := r.c.ACLWhoAmI(ctx).Err()
	if err == nil {
		err = r.c.ACLUsers(ctx).Err()
	}
	if err == nil {
		return true, nil
	}
	if redis.HasErrorPrefix(err, "NOPERM") || unknownCommand(err) {
		return false, nil
	}
	return false, err
}

// unknownCommand reports whether err is a Redis server's reply that it
// has no such command (a Redis before 6 asked for ACL). That reply has no
// code of its own: it is an ERR whose message says so.
func unknownCommand(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && redis.HasErrorPrefix(err, "ERR") && strings.Contains(strings.ToLower(re.Error()), "unknown command")
}

// SetWorkerUser creates (or resets) a worker's user with its password and
// rules, and records the password's SHA-256 (never the password) so that
// the user can be made again after a Redis restart: ACL users live in
// memory, not in the append-only file. Safe to retry: it resets the user
// first.
func (r *aclCmds) SetWorkerUser(ctx context.Context, id, password string, scope UserScope) error {
	sum := sha256.Sum256([]byte(password))
	hash := hex.EncodeToString(sum[:])
	if err := r.c.HSet(ctx, ctlplane.WorkerUsersKey(r.Keys), id, scope.record(hash)).Err(); err != nil {
		return err
	}
	return r.setUser(ctx, id, hash, scope)
}

func (r *aclCmds) setUser(ctx context.Context, id, hash string, scope UserScope) error {
	rules := append([]string{"reset", "on", "#" + hash}, r.WorkerACL(id, scope)...)
	return r.c.ACLSetUser(ctx, r.WorkerUser(id), rules...).Err()
}

// CopyWorkerUser makes (or resets) worker to's user with the password of
// worker from's (its recorded hash: the password itself is only in from's
// container) and to's rules: the wrapper in from's container can then log
// in as to. It fails when from has no recorded user.
func (r *aclCmds) CopyWorkerUser(ctx context.Context, from, to string, scope UserScope) error {
	v, err := r.c.HGet(ctx, ctlplane.WorkerUsersKey(r.Keys), from).Result()
	if err != nil {
		return err
	}
	_, hash, ok := parseRecord(v)
	if !ok {
		return fmt.Errorf("rdb: the record of %s's user is %q", from, v)
	}
	if err := r.c.HSet(ctx, ctlplane.WorkerUsersKey(r.Keys), to, scope.record(hash)).Err(); err != nil {
		return err
	}
	return r.setUser(ctx, to, hash, scope)
}

// RestoreWorkerUsers makes again the recorded worker users that Redis
// lost (a restart), and returns how many.
func (r *aclCmds) RestoreWorkerUsers(ctx context.Context) (int, error) {
	recorded, err := r.c.HGetAll(ctx, ctlplane.WorkerUsersKey(r.Keys)).Result()
	if err != nil || len(recorded) == 0 {
		return 0, err
	}
	have, err := r.liveWorkerUsers(ctx)
	if err != nil {
		return 0, err
	}
	exists := map[string]bool{}
	for _, id := range have {
		exists[id] = true
	}
	n := 0
	for id, v := range recorded {
		scope, hash, ok := parseRecord(v)
		if exists[id] || !ok {
			continue
		}
		if err := r.setUser(ctx, id, hash, scope); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// DeleteWorkerUser deletes a worker's user and its record (no error when
// it is gone).
func (r *aclCmds) DeleteWorkerUser(ctx context.Context, id string) error {
	if err := r.c.ACLDelUser(ctx, r.WorkerUser(id)).Err(); err != nil {
		return err
	}
	return r.c.HDel(ctx, ctlplane.WorkerUsersKey(r.Keys), id).Err()
}

// WorkerUsers returns the ids of the worker users of this key prefix, as
// Redis has them and as recorded.
func (r *aclCmds) WorkerUsers(ctx context.Context) ([]string, error) {
	ids, err := r.liveWorkerUsers(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	recorded, err := r.c.HKeys(ctx, ctlplane.WorkerUsersKey(r.Keys)).Result()
	if err != nil {
		return nil, err
	}
	for _, id := range recorded {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// liveWorkerUsers returns the ids of the worker users Redis has now.
func (r *aclCmds) liveWorkerUsers(ctx context.Context) ([]string, error) {
	users, err := r.c.ACLUsers(ctx).Result()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, u := range users {
		if id, ok := strings.CutPrefix(u, r.WorkerUserPrefix()); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
