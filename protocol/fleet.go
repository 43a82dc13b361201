package protocol

// A fleet is several hosts (Docker engines), each with one or more
// worker-managers, sharing one Redis and key prefix. Every worker belongs
// to one host: the one whose engine runs its container. Only a manager of
// that host touches the container; commands and control requests for the
// worker are forwarded to the host's own streams. The spawner's
// CONTROLPLANE.md, "Fleet: hosts, placement and host loss", says what
// holds.
//
// The keys below are the control plane's own; they are named here,
// not with the rest of its names in the spawner, because the fault suite
// (a module apart from the spawner) watches them from outside to check
// what a fleet does. The rest of this file is the contract: the host on a
// worker's status hash, events and replies, and a create's placement.

// Hosts is the sorted set of the fleet's hosts scored by the Unix
// milliseconds until which each is live: its managers renew the score
// every quarter of HOST_TTL.
func (k Keys) Hosts() string { return k.join("hosts") }

// Placement is the hash worker id → host of every worker that holds a
// slot (admitted create, member of Workers, worker being retired). It is
// written when a create is admitted to a host and removed when the slot
// is given back.
func (k Keys) Placement() string { return k.join("placement") }

// Hibernated is the set of the hibernated workers of one host: they have
// no container and hold no slot; their status hash stays, and a task on
// their input wakes them. A worker of the fleet is a member of Workers or
// of one host's Hibernated.
func (k Keys) Hibernated(host string) string { return k.join("hibernated", "host", host) }

// HibernatedHosts is the set of the hosts that have had a hibernated
// worker: a listing of the workers reads Hibernated of each (a host whose
// managers stopped has left Hosts, and its hibernated workers are still
// workers).
func (k Keys) HibernatedHosts() string { return k.join("hibernated", "hosts") }

// HostCommands is the stream of the commands forwarded to one host (a
// create placed there, an action on one of its workers), read by its
// managers through ManagerGroup.
func (k Keys) HostCommands(host string) string { return k.join("commands", "host", host) }

// HostControl is the stream of the control requests forwarded to one
// host, read by its managers through ManagerGroup.
func (k Keys) HostControl(host string) string { return k.join("control", "host", host) }

// StatusFieldHost is the worker status hash field naming the worker's
// host.
const StatusFieldHost = "host"

// EnvWorkerHost is the variable that tells the wrapper its host (it puts
// it on its lifecycle events).
const EnvWorkerHost = "WORKER_HOST"

// EventHostLost is published by the spawner for each worker of a lost
// host that it retires (detail: host).
const EventHostLost Event = "host_lost"

// Placement constrains the hosts a create may be placed on: a host by id,
// and labels every chosen host must carry. Empty: any host.
type Placement struct {
	Host   string            `json:"host,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Matches reports whether a host with this id and these labels satisfies p.
func (p *Placement) Matches(host string, labels map[string]string) bool {
	if p == nil {
		return true
	}
	if p.Host != "" && p.Host != host {
		return false
	}
	for k, v := range p.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (p *Placement) validate(path string) error {
	if p == nil {
		return nil
	}
	if p.Host != "" && !ValidHostID(p.Host) {
		return fieldErr(path+".host", "is %q: a host id is [A-Za-z0-9_.-]{1,64}", p.Host)
	}
	for k, v := range p.Labels {
		if !ValidHostLabel(k) || len(v) > 256 {
			return fieldErr(path+".labels", "has %q: a label is [a-z0-9_.-]{1,64}, its value at most 256 bytes", k)
		}
	}
	return nil
}

// ValidHostID reports whether id can name a host: [A-Za-z0-9_.-]{1,64}
// (it is part of Redis key names and container labels).
func ValidHostID(id string) bool { return hostName(id, true) }

// ValidHostLabel reports whether s can name a host label (a create's
// placement labels, a host's HOST_LABELS): [a-z0-9_.-]{1,64}.
func ValidHostLabel(s string) bool { return hostName(s, false) }

// hostName reports whether s is 1 to 64 of [a-z0-9_.-], and of A-Z too
// when upper.
func hostName(s string, upper bool) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || upper && r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}
