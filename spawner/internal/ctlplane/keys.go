package ctlplane

import (
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// join names a key under k's prefix, as protocol.Keys does.
func join(k protocol.Keys, parts ...string) string {
	p := k.Prefix
	if p == "" {
		p = protocol.DefaultPrefix
	}
	return p + ":" + strings.Join(parts, ":")
}

// LeaseKey is the string key, with a TTL, whose value is the id of the
// manager instance that holds the named lease (LeaderLease,
// HostLeaderLease, HostLossLease).
func LeaseKey(k protocol.Keys, name string) string { return join(k, "lease", name) }

// CreationQueueKey is the FIFO list of the create commands waiting for a
// slot.
func CreationQueueKey(k protocol.Keys) string { return join(k, "creation_queue") }

// CreationLeasesKey is the sorted set of the creates waiting in the
// creation queue, scored by the Unix milliseconds at which their lease
// runs out: a queued create whose manager died leaves the queue when its
// lease does.
func CreationLeasesKey(k protocol.Keys) string { return join(k, "creation_queue", "leases") }

// CreatingKey is the sorted set of the creates that hold a worker slot and
// have not yet made their worker a member of protocol.Keys.Workers, scored
// by the Unix milliseconds at which their lease runs out.
func CreatingKey(k protocol.Keys) string { return join(k, "creating") }

// RetiringKey is the sorted set of the workers being retired (they have
// left the workers set; their tasks are being answered and their container
// removed), scored by the Unix milliseconds at which the retirement's
// lease runs out: the leader finishes a retirement whose manager died.
func RetiringKey(k protocol.Keys) string { return join(k, "retiring") }

// RetiredKey is the sorted set of the long-lived workers retired under
// their id (score: when, Unix ms), kept for their retention: a task sent
// to one of them is answered WORKER_GONE.
func RetiredKey(k protocol.Keys) string { return join(k, "retired") }

// CommandWorkerKey is the string key that maps a create command's id to
// the worker id it made, so that the command delivered again (its manager
// died) continues that worker instead of making a second one.
func CommandWorkerKey(k protocol.Keys, commandID string) string {
	return join(k, "command", commandID, "worker")
}

// HostKey is the hash describing one host (the HostField* fields), written
// by its managers.
func HostKey(k protocol.Keys, host string) string { return join(k, "host", host) }

// HostPausedKey is the set of the workers of one host whose status hash
// says their container is paused: the spawner writes it in the same
// transaction as that field, and its reconciler repairs it. The host's
// wake-up loop reads it instead of every worker's status.
func HostPausedKey(k protocol.Keys, host string) string { return join(k, "paused", "host", host) }

// HostHibernatedKey is the set of the hibernated workers of one host:
// they have no container, hold no slot, and the host's wake-up loop
// watches their inputs.
func HostHibernatedKey(k protocol.Keys, host string) string { return k.Hibernated(host) }

// ManagersKey is the set of the manager ids that have written a state
// hash; a member whose state hash has expired is a manager gone (readers
// drop it).
func ManagersKey(k protocol.Keys) string { return k.Managers() }

// ManagerStateKey is the hash a manager refreshes about itself (the
// ManagerField* fields), expiring ManagerStateTTLSeconds after its last
// refresh.
func ManagerStateKey(k protocol.Keys, managerID string) string { return k.ManagerState(managerID) }

// PoolWarmSetKey is the set of the warm workers of a pool ready to be
// given to a create (made, started, paused). Taking one is an SPOP: one
// create gets it.
func PoolWarmSetKey(k protocol.Keys, pool string) string { return join(k, "pool", pool, "warm") }

// PoolMembersKey is the set of every worker made for a pool (warm,
// allocated or of its fixed size) until it is retired: the pool's tending
// reads these workers, never the whole fleet.
func PoolMembersKey(k protocol.Keys, pool string) string { return join(k, "pool", pool, "members") }

// PoolStatsKey is the hash of a pool's counters: allocations,
// allocation_wait_us (their sum), refills, recycles.
func PoolStatsKey(k protocol.Keys, pool string) string { return join(k, "pool", pool, "stats") }

// PoolsKey is the hash of the pool templates the managers serve: pool name
// → the template as JSON (name, spec, min_warm, max_total, recycle_after,
// size), refreshed by the leader, for `workerctl pools` and dashboards.
func PoolsKey(k protocol.Keys) string { return join(k, "pools") }

// ImagesLastUsedKey is the sorted set of worker image tags scored by the
// Unix time (seconds) of their last use; the image garbage collector reads
// it and touches no image outside it.
func ImagesLastUsedKey(k protocol.Keys) string { return join(k, "images", "last_used") }

// VolumesLastUsedKey is the sorted set of a key prefix's project volumes
// scored by the Unix time (seconds) of their last use; the leader removes
// those unused for VOLUME_RETENTION.
func VolumesLastUsedKey(k protocol.Keys) string { return join(k, "volumes", "last_used") }

// WorkerUsersKey is the hash of the Redis users the manager made for its
// workers: worker id → "<kind> <SHA-256 of the password>", so that the
// users can be made again after a Redis restart (ACL users are not in the
// append-only file). It never holds a password.
func WorkerUsersKey(k protocol.Keys) string { return join(k, "worker_users") }

// SpareNetnsKey is the string key, with a TTL, that says a spare network
// namespace's holder container (its id) is kept by a live manager: a
// holder without one is anyone's to remove.
func SpareNetnsKey(k protocol.Keys, holderID string) string {
	return join(k, "netns", "spare", holderID)
}
