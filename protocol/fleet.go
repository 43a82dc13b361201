package protocol

import (
	"fmt"
	"sort"
	"strings"
)

// A fleet is several hosts (Docker engines), each with one or more
// worker-managers, sharing one Redis and key prefix. Every worker belongs
// to one host: the one whose engine runs its container. Only a manager of
// that host touches the container; commands and control requests for the
// worker are forwarded to the host's own streams. PROTOCOL.md, "Fleet:
// hosts, placement and host loss", says what holds.

// DefaultHostTTLIntervals is how long, in heartbeat intervals, a host
// stays live after its managers last renewed it (HOST_TTL defaults to it):
// a host unrenewed that long is lost, and its dead workers are retired
// within 3 heartbeat intervals of its death.
const DefaultHostTTLIntervals = 2

// Hosts is the sorted set of the fleet's hosts scored by the Unix
// milliseconds until which each is live: its managers renew the score
// every quarter of HOST_TTL.
func (k Keys) Hosts() string { return k.join("hosts") }

// Host is the hash describing one host (HostField*), written by its
// managers.
func (k Keys) Host(host string) string { return k.join("host", host) }

// Placement is the hash worker id → host of every worker that holds a
// slot (admitted create, member of Workers, worker being retired). It is
// written when a create is admitted to a host and removed when the slot
// is given back.
func (k Keys) Placement() string { return k.join("placement") }

// HostCommands is the stream of the commands forwarded to one host (a
// create placed there, an action on one of its workers), read by its
// managers through ManagerGroup.
func (k Keys) HostCommands(host string) string { return k.join("commands", "host", host) }

// HostControl is the stream of the control requests forwarded to one
// host, read by its managers through ManagerGroup.
func (k Keys) HostControl(host string) string { return k.join("control", "host", host) }

// HostPaused is the set of the workers of one host whose status hash
// says their container is paused: the spawner writes it in the same
// transaction as that field, and its reconciler repairs it. The host's
// wake-up loop reads it instead of every worker's status.
func (k Keys) HostPaused(host string) string { return k.join("paused", "host", host) }

// HostLeaderLease names the lease of the manager that runs a host's own
// loops (health, wake-up, timeouts, reconciliation, volume and image GC):
// one per host, where LeaderLease is one per fleet.
func HostLeaderLease(host string) string { return "leader:host:" + host }

// HostLossLease names the lease of the manager that handles a lost host.
func HostLossLease(host string) string { return "host_lost:" + host }

// Fields of a host hash (Keys.Host).
const (
	HostFieldMaxWorkers = "max_workers" // its MAX_CONCURRENT_WORKERS
	HostFieldLabels     = "labels"      // its HOST_LABELS, as a JSON object
	HostFieldEngine     = "engine"      // the engine's name (docker info)
	HostFieldUpdatedAt  = "updated_at"  // the last renewal
	HostFieldLostAt     = "lost_at"     // when another manager found it lost (cleared when it returns)
)

// StatusFieldHost is the worker status hash field naming the worker's
// host; LabelHost the container label.
const (
	StatusFieldHost = "host"
	LabelHost       = LabelPrefix + "host"
)

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

// ParseHostLabels reads HOST_LABELS: "k=v,k=v" (a bare "k" means k=true).
func ParseHostLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			v = "true"
		}
		k = strings.TrimSpace(k)
		if !ValidHostLabel(k) {
			return nil, fmt.Errorf("host label %q: a label is [a-z0-9_.-]{1,64}", k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// FormatHostLabels writes labels as ParseHostLabels reads them, sorted.
func FormatHostLabels(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
