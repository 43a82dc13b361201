package protocol

// Names of the control plane's own state: what the worker-managers share
// in Redis so that no promise rests on the memory of one process. Each
// record that a manager holds while it works carries a lease (an owner and
// an expiry); a lease that runs out is reclaimed by any manager.

// DefaultLeaseTTL is how long a lease lasts unless renewed (LEASE_TTL).
// The holder renews it every third of it.
const DefaultLeaseTTLSeconds = 15

// LeaderLease names the lease held by the manager that runs the loops
// that must run once per key prefix: health, reconciliation, timeouts,
// image GC and the retirement of workers left half-retired.
const LeaderLease = "leader"

// Lease is the string key, with a TTL, whose value is the id of the
// manager that holds the named lease.
func (k Keys) Lease(name string) string { return k.join("lease", name) }

// CreationLeases is the sorted set of the creates waiting in the
// creation queue (CreationQueue), scored by the Unix milliseconds at
// which their lease runs out: a queued create whose manager died leaves
// the queue when its lease does.
func (k Keys) CreationLeases() string { return k.join("creation_queue", "leases") }

// Creating is the sorted set of the creates that hold a worker slot and
// have not yet made their worker a member of Workers, scored by the Unix
// milliseconds at which their lease runs out.
func (k Keys) Creating() string { return k.join("creating") }

// Retiring is the sorted set of the workers being retired (they have
// left Workers; their tasks are being answered and their container
// removed), scored by the Unix milliseconds at which the retirement's
// lease runs out: the leader finishes a retirement whose manager died.
func (k Keys) Retiring() string { return k.join("retiring") }

// CommandWorker is the string key that maps a create command's id to the
// worker id it made, so that the command delivered again (its manager
// died) continues that worker instead of making a second one.
func (k Keys) CommandWorker(commandID string) string { return k.join("command", commandID, "worker") }

// More fields of the worker status hash, written by the spawner.
const (
	StatusFieldManagerID    = "manager_id"   // the manager that made the worker
	StatusFieldReplacements = "replacements" // how many dead workers this one's chain replaced
	StatusFieldRetiredAt    = "retired_at"   // when it left Workers
	StatusFieldRetireReason = "retire_reason"
	StatusFieldPool         = "pool"       // the warm pool the worker belongs to ("" for none)
	StatusFieldPoolState    = "pool_state" // PoolWarm, PoolAllocated or PoolMember
)

// States of a pool worker (StatusFieldPoolState).
const (
	PoolWarm      = "warm"      // made ahead, paused, waiting for a create
	PoolAllocated = "allocated" // given to a create
	PoolMember    = "member"    // one of a pool's fixed size, running
)

// PoolWarmSet is the set of the warm workers of a pool ready to be given
// to a create (made, started, paused). Taking one is an SPOP: one create
// gets it.
func (k Keys) PoolWarmSet(pool string) string { return k.join("pool", pool, "warm") }

// PoolStats is the hash of a pool's counters: allocations,
// allocation_wait_ms (their sum), refills, recycles.
func (k Keys) PoolStats(pool string) string { return k.join("pool", pool, "stats") }

// Labels the spawner puts on a worker's container beyond the Label*
// constants of every container.
const (
	// LabelCommandID marks the container a create command made, so that
	// the same command delivered again finds it.
	LabelCommandID = LabelPrefix + "command_id"
	// LabelImage is the worker image tag the container was made from.
	LabelImage = LabelPrefix + "image"
)

// VolumesLastUsed is the sorted set of a key prefix's project volumes
// scored by the Unix time (seconds) of their last use; the leader removes
// those unused for VOLUME_RETENTION.
func (k Keys) VolumesLastUsed() string { return k.join("volumes", "last_used") }

// WorkerUsers is the hash of the Redis users the manager made for its
// workers: worker id → "<kind> <SHA-256 of the password>", so that the
// users can be made again after a Redis restart (ACL users are not in the
// append-only file). It never holds a password.
func (k Keys) WorkerUsers() string { return k.join("worker_users") }

// Pools is the hash of the pool templates the managers serve: pool name →
// the template as JSON (name, spec, min_warm, max_total, recycle_after,
// size), refreshed by the leader, for `workerctl pools` and dashboards.
func (k Keys) Pools() string { return k.join("pools") }
