package ctlplane

// What a manager holds while it works carries a lease (an owner and an
// expiry); a lease that runs out is reclaimed by any manager.

// DefaultLeaseTTLSeconds is how long a lease lasts unless renewed
// (LEASE_TTL). The holder renews it every third of it.
const DefaultLeaseTTLSeconds = 15

// LeaderLease names the lease held by the manager that runs the loops
// that must run once per fleet: input retention, the warm pools and the
// metrics read from the streams.
const LeaderLease = "leader"

// HostLeaderLease names the lease of the manager that runs a host's own
// loops (health, wake-up, timeouts, reconciliation, volume and image GC):
// one per host, where LeaderLease is one per fleet.
func HostLeaderLease(host string) string { return "leader:host:" + host }

// HostLossLease names the lease of the manager that handles a lost host.
func HostLossLease(host string) string { return "host_lost:" + host }
