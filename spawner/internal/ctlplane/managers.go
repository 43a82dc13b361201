package ctlplane

// Each running manager refreshes a hash about itself with a TTL, so that
// an operator sees which managers run, where, since when, whether they
// reconcile and which leases they hold; a manager that dies drops out
// when its hash expires.

// ManagerStateTTLSeconds is how long a manager's state hash outlives its
// last refresh; a manager refreshes it every third of that.
const ManagerStateTTLSeconds = 30

// Fields of the manager state hash (ManagerStateKey).
const (
	ManagerFieldID              = "id"                // MANAGER_ID
	ManagerFieldInstance        = "instance"          // the lease owner id of the running process
	ManagerFieldHost            = "host"              // the host name
	ManagerFieldPID             = "pid"               // the process id on that host
	ManagerFieldVersion         = "version"           // the build's version (module version or VCS revision)
	ManagerFieldStartedAt       = "started_at"        // RFC 3339
	ManagerFieldUpdatedAt       = "updated_at"        // the last refresh, RFC 3339
	ManagerFieldLastReconcileAt = "last_reconcile_at" // this manager's last reconciliation ("" when none)
	ManagerFieldLeases          = "leases"            // the named leases it holds, comma-separated (e.g. leader)
	ManagerFieldMetricsAddr     = "metrics_addr"      // where its /metrics and dashboard listen ("" when off)
)
