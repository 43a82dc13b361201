package ctlplane

import (
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Each running manager refreshes a hash about itself with a TTL, so that
// an operator sees which managers run, where, since when, whether they
// reconcile and which leases they hold; a manager that dies drops out
// when its hash expires.

// ManagerStateTTLSeconds is how long a manager's state hash outlives its
// last refresh; a manager refreshes it every third of that.
const ManagerStateTTLSeconds = protocol.ManagerStateTTLSeconds

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

// ManagerState is what a worker-manager says about itself in Redis
// (Keys.ManagerState), for operators: `workerctl managers`, the dashboard.
type ManagerState struct {
	ID              string    `json:"id"`
	Instance        string    `json:"instance"`
	Host            string    `json:"host"`
	PID             int       `json:"pid"`
	Version         string    `json:"version"`
	StartedAt       time.Time `json:"started_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	LastReconcileAt time.Time `json:"last_reconcile_at,omitzero"`
	Leases          []string  `json:"leases"`
	MetricsAddr     string    `json:"metrics_addr,omitempty"`
}

// ParseManagerState reads a manager's state hash (the ManagerField*
// fields).
func ParseManagerState(h map[string]string) ManagerState {
	m := ManagerState{ID: h[ManagerFieldID], Instance: h[ManagerFieldInstance], Host: h[ManagerFieldHost],
		Version: h[ManagerFieldVersion], MetricsAddr: h[ManagerFieldMetricsAddr], Leases: []string{}}
	m.PID, _ = strconv.Atoi(h[ManagerFieldPID])
	m.StartedAt, _ = protocol.ParseTime(h[ManagerFieldStartedAt])
	m.UpdatedAt, _ = protocol.ParseTime(h[ManagerFieldUpdatedAt])
	m.LastReconcileAt, _ = protocol.ParseTime(h[ManagerFieldLastReconcileAt])
	if l := h[ManagerFieldLeases]; l != "" {
		m.Leases = strings.Split(l, ",")
	}
	return m
}
