package protocol

import (
	"strconv"
	"testing"
	"time"
)

func TestAffinity(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	later := now.Add(10 * time.Minute)
	tests := []struct {
		name   string
		fields map[string]string
		worker string
		ok     bool
	}{
		{"no record", nil, "", false},
		{"held, not lapsed", map[string]string{"worker_id": "w1", "worker_expires_at_ms": strconv.FormatInt(later.UnixMilli(), 10)}, "w1", true},
		{"held, lapsed", map[string]string{"worker_id": "w1", "worker_expires_at_ms": strconv.FormatInt(now.Add(-time.Second).UnixMilli(), 10)}, "w1", false},
		{"RFC 3339 only", map[string]string{"worker_id": "w2", "worker_expires_at": FormatTime(later)}, "w2", true},
		{"no expiry", map[string]string{"worker_id": "w3"}, "", false},
		{"nobody", map[string]string{"session_id": "s"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, ok := Affinity(tt.fields, now)
			if w != tt.worker || ok != tt.ok {
				t.Fatalf("Affinity = %q, %v; want %q, %v", w, ok, tt.worker, tt.ok)
			}
		})
	}
}
