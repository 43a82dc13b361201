package ctlplane

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agentvisor/agentvisor/protocol"
)

// DefaultHostTTLIntervals is how long, in heartbeat intervals, a host
// stays live after its managers last renewed it (HOST_TTL defaults to it):
// a host unrenewed that long is lost, and its dead workers are retired
// within 3 heartbeat intervals of its death.
const DefaultHostTTLIntervals = 2

// Fields of a host hash (HostKey).
const (
	HostFieldMaxWorkers = "max_workers" // its MAX_CONCURRENT_WORKERS
	HostFieldLabels     = "labels"      // its HOST_LABELS, as a JSON object
	HostFieldEngine     = "engine"      // the engine's name (docker info)
	HostFieldUpdatedAt  = "updated_at"  // the last renewal
	HostFieldLostAt     = "lost_at"     // when another manager found it lost (cleared when it returns)
)

// ParseHostLabels reads HOST_LABELS: "k=v,k=v" (a bare "k" means k=true).
// A label name follows the rule of a create's placement labels
// (protocol.ValidHostLabel).
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
		if !protocol.ValidHostLabel(k) {
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
