package rdb

import (
	"context"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// Per-worker Redis users (Redis 6+ ACL). A worker connects as a user of
// its own that may run only the commands the wrapper uses, on only its own
// keys and the shared ones its kind must touch; the manager's credentials
// never enter a container. The user goes when the worker is retired.

// WorkerUserPrefix starts the name of every worker user of a key prefix.
func (r *RDB) WorkerUserPrefix() string { return "agentvisor:" + r.Keys.Prefix + ":" }

// WorkerUser is the name of a worker's Redis user.
func (r *RDB) WorkerUser(id string) string { return r.WorkerUserPrefix() + id }

// workerCommands are the commands a wrapper runs (directly or in its Lua
// scripts), and no other: no KEYS or SCAN (they list every key name), no
// CLIENT LIST or KILL, no CONFIG, no ACL, no FLUSH.
var workerCommands = []string{
	"-@all", "+@connection", "-@dangerous", "+ping",
	"+xadd", "+xreadgroup", "+xack", "+xgroup|create", "+xpending", "+xrange", "+xrevrange", "+xlen", "+xinfo|groups",
	"+hset", "+hget", "+hmget", "+hgetall", "+hdel", "+hincrby", "+hincrbyfloat", "+hexists",
	"+set", "+get", "+setex", "+del", "+exists", "+expire", "+pexpire", "+ttl", "+pttl",
	"+eval", "+evalsha", "+script|load", "+script|exists", "+multi", "+exec", "+discard",
}

// WorkerACL returns the ACL rules of a worker's user: its commands, and
// its keys (read and write unless marked): its status hash and heartbeat,
// its input and output streams (the developer queue's for a developer
// worker), run hashes, sessions, project contexts and usage counters
// (keyed by request and project, which no worker owns alone), and write
// only to the lifecycle and control streams.
func (r *RDB) WorkerACL(id string, kind protocol.Kind) []string {
	k := r.Keys
	keys := []string{k.Status(id), k.Heartbeat(id), k.Run("*"), k.Session("*", "*"), k.ProjectContext("*"), k.UsageProject("*"),
		k.UsageSession("*"), k.UsageWorker(id), k.InputFor(kind, id), k.OutputFor(kind, id)}
	rules := append([]string{}, workerCommands...)
	rules = append(rules, "resetchannels")
	for _, key := range keys {
		rules = append(rules, "~"+key)
	}
	rules = append(rules, "%W~"+k.Lifecycle(), "%W~"+k.Control())
	return rules
}

// ACLSupported reports whether this Redis has ACLs the manager may use
// (Redis 6+, and a manager user allowed to manage users).
func (r *RDB) ACLSupported(ctx context.Context) (bool, error) {
	err := r.C.ACLWhoAmI(ctx).Err()
	if err == nil {
		err = r.C.ACLUsers(ctx).Err()
	}
	if err == nil {
		return true, nil
	}
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "unknown command") || strings.Contains(msg, "noperm") || strings.Contains(msg, "no permissions") {
		return false, nil
	}
	return false, err
}

// SetWorkerUser creates (or resets) a worker's user with its password and
// rules. Safe to retry: it resets the user first.
func (r *RDB) SetWorkerUser(ctx context.Context, id, password string, kind protocol.Kind) error {
	rules := append([]string{"reset", "on", ">" + password}, r.WorkerACL(id, kind)...)
	return r.C.ACLSetUser(ctx, r.WorkerUser(id), rules...).Err()
}

// DeleteWorkerUser deletes a worker's user (no error when it is gone).
func (r *RDB) DeleteWorkerUser(ctx context.Context, id string) error {
	return r.C.ACLDelUser(ctx, r.WorkerUser(id)).Err()
}

// WorkerUsers returns the ids of the worker users of this key prefix.
func (r *RDB) WorkerUsers(ctx context.Context) ([]string, error) {
	users, err := r.C.ACLUsers(ctx).Result()
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
