// Package rdb owns every Redis call and Lua script of the spawner. Names
// come from protocol.Keys; no other package of the spawner module sends
// Redis a command, spells a key or runs a script. Every script is idempotent: run twice (a client retry
// after a lost reply), it leaves Redis as one run does.
package rdb

import (
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// RDB is the spawner's view of Redis: one value per command family, each
// the implementation of that family's interface (one per file, each file
// opening with its own, as go-redis's command files do):
//
//	Conn          open.go       the connection itself (Ping, the client module's Watcher)
//	Admission     admission.go  the creation queue, the slots, the workers set
//	WorkerStatus  status.go     a worker's status hash, history and heartbeat
//	Streams       streams.go    entries, consumer groups, replies
//	Tasks         tasks.go      a worker's input: busy or not, held, waiting, answered
//	Runs          runs.go       run hashes
//	Projects      projects.go   a project's budget and session
//	HostRegistry  hosts.go      hosts, placement, the host streams
//	Hibernation   hibernate.go  hibernated workers and their wake
//	Retirement    retire.go     retiring workers and their keys
//	Pools         pools.go      warm pools
//	Managers      managers.go   the managers' own records
//	Leases        lease.go      named leases
//	LastUse       lastused.go   images' and volumes' last use
//	NetnsMarks    netns.go      marks of the spare network namespaces (engine/docker/netns.go)
//	ACL           acl.go        per-worker Redis users
//
// A component is given the families it uses (an *RDB is each of them),
// so that what it may do to Redis is in its type, and its tests can
// stand a fake of one family in for Redis. The families share one
// connection and one set of settings (Config); its client is unexported:
// nothing outside this package sends Redis a command (owner_test.go
// checks the whole module).
type RDB struct {
	*Config
	Conn
	Admission
	WorkerStatus
	Streams
	Tasks
	Runs
	Projects
	HostRegistry
	Hibernation
	Retirement
	Pools
	Managers
	Leases
	LastUse
	NetnsMarks
	ACL
}

// Config is the key names and the retention of what the spawner writes,
// shared by every family of one RDB; set after New, before use.
type Config struct {
	Keys protocol.Keys
	// Retention of what the spawner writes (zero values: the defaults).
	StreamMaxLen int64         // approximate MAXLEN of the lifecycle stream and reply streams
	ReplyTTL     time.Duration // a reply stream expires this long after its last reply
	Retention    time.Duration // a retired worker's keys live this long
	RunRetention time.Duration // a run the spawner answered lives this long
	// Wait is WAIT's policy for the entries a client must not lose to a
	// failover (Send: a task, a command); off when zero.
	Wait protocol.WaitPolicy
}

// core is what every family's commands hold: the client and the shared
// settings.
type core struct {
	c redis.Cmdable
	*Config
}

// Defaults of the retention settings.
const (
	DefaultReplyTTL  = time.Hour
	DefaultRetention = 24 * time.Hour
)

// New returns an RDB over c with the default retention.
func New(c redis.Cmdable, keys protocol.Keys) *RDB {
	cfg := &Config{Keys: keys, StreamMaxLen: protocol.DefaultStreamMaxLen, ReplyTTL: DefaultReplyTTL, Retention: DefaultRetention,
		RunRetention: protocol.DefaultRunRetention}
	k := &core{c: c, Config: cfg}
	return &RDB{Config: cfg, Conn: &connCmds{k}, Admission: &admissionCmds{k}, WorkerStatus: &statusCmds{k}, Streams: &streamCmds{k},
		Tasks: &taskCmds{k}, Runs: &runCmds{k}, Projects: &projectCmds{k}, HostRegistry: &hostCmds{k}, Hibernation: &hibernationCmds{k},
		Retirement: &retireCmds{k}, Pools: &poolCmds{k}, Managers: &managerCmds{k}, Leases: &leaseCmds{k}, LastUse: &lastUseCmds{k},
		NetnsMarks: &netnsCmds{k}, ACL: &aclCmds{k}}
}

// Nil reports whether err is Redis's "no such key" answer.
func Nil(err error) bool { return errors.Is(err, redis.Nil) }

func ms(t time.Time) int64 { return t.UnixMilli() }

// names puts the protocol's names into a script's source: no field name
// or state is spelled by hand inside Lua.
var names = strings.NewReplacer(
	"$DATA", protocol.EntryField,
	"$RUN_STATUS", protocol.RunFieldStatus,
	"$RUN_ERROR", protocol.RunFieldError,
	"$RUN_FINISHED_AT", protocol.RunFieldFinishedAt,
	"$RUN_UPDATED_AT", protocol.RunFieldUpdatedAt,
	"$RUN_ATTEMPTS", protocol.RunFieldAttempts,
	"$COMPLETED", string(protocol.RunCompleted),
	"$FAILED", string(protocol.RunFailed),
	"$WORKER_STATE", protocol.StatusFieldState,
	"$CONTAINER", protocol.StatusFieldContainer,
	"$PAUSED", string(protocol.ContainerPaused),
	"$WORKER_REQUEST", protocol.StatusFieldRequestID,
	"$BUSY", string(protocol.WorkerBusy),
	"$STOPPING", string(protocol.WorkerStopping),
	"$STOPPED", string(protocol.WorkerStopped),
	"$SESSION_WORKER_EXPIRES_MS", protocol.SessionFieldWorkerExpiresMS,
	"$SESSION_WORKER_EXPIRES", protocol.SessionFieldWorkerExpires,
	"$SESSION_WORKER", protocol.SessionFieldWorkerID,
)

func script(src string) *redis.Script {
	src = strings.ReplaceAll(names.Replace(src), "$LESS\n", luaLess)
	return redis.NewScript(strings.ReplaceAll(src, "$DELIVERED\n", luaDelivered))
}

// luaDelivered is the Lua function delivered(key, group): the
// last-delivered-id of a consumer group of a stream, nil when the stream
// or the group does not exist ($DELIVERED in a script's source).
const luaDelivered = `local function delivered(key, group)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', key)
  if not ok then return nil end
  for _, g in ipairs(groups) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == group then return last end
  end
  return nil
end
`

// luaLess is the Lua function less(a, b) that orders two stream entry
// ids, for the scripts that compare them ($LESS in their source).
const luaLess = `local function less(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  if am ~= bm then return am < bm end
  return as < bs
end
`
