package ctlplane

import (
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
)

func TestKeyNames(t *testing.T) {
	k := protocol.Keys{}
	tests := []struct {
		name, got, want string
	}{
		{"lease", LeaseKey(k, LeaderLease), "worker:lease:leader"},
		{"host leader lease", LeaseKey(k, HostLeaderLease("h1")), "worker:lease:leader:host:h1"},
		{"host loss lease", LeaseKey(k, HostLossLease("h1")), "worker:lease:host_lost:h1"},
		{"creation queue", CreationQueueKey(k), "worker:creation_queue"},
		{"creation leases", CreationLeasesKey(k), "worker:creation_queue:leases"},
		{"creating", CreatingKey(k), "worker:creating"},
		{"retiring", RetiringKey(k), "worker:retiring"},
		{"command worker", CommandWorkerKey(k, "c1"), "worker:command:c1:worker"},
		{"host", HostKey(k, "h1"), "worker:host:h1"},
		{"host paused", HostPausedKey(k, "h1"), "worker:paused:host:h1"},
		{"managers", ManagersKey(k), "worker:managers"},
		{"manager state", ManagerStateKey(k, "m1"), "worker:manager:m1"},
		{"pool warm", PoolWarmSetKey(k, "p1"), "worker:pool:p1:warm"},
		{"pool members", PoolMembersKey(k, "p1"), "worker:pool:p1:members"},
		{"pool stats", PoolStatsKey(k, "p1"), "worker:pool:p1:stats"},
		{"pools", PoolsKey(k), "worker:pools"},
		{"images", ImagesLastUsedKey(k), "worker:images:last_used"},
		{"volumes", VolumesLastUsedKey(k), "worker:volumes:last_used"},
		{"worker users", WorkerUsersKey(k), "worker:worker_users"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

// TestKeysSharePrefix checks that the control plane's keys live under the
// same prefix as protocol's, whatever the prefix.
func TestKeysSharePrefix(t *testing.T) {
	for _, prefix := range []string{"", "worker", "staging:wk"} {
		k, err := protocol.NewKeys(prefix)
		if err != nil {
			t.Fatal(err)
		}
		want := k.Commands()[:len(k.Commands())-len("commands")] + "creating"
		if got := CreatingKey(k); got != want {
			t.Errorf("prefix %q: CreatingKey = %q, want %q", prefix, got, want)
		}
	}
	if got := CreatingKey(protocol.Keys{Prefix: "staging:wk"}); got != "staging:wk:creating" {
		t.Errorf("CreatingKey = %q", got)
	}
}

func TestHostLabelsParse(t *testing.T) {
	got, err := ParseHostLabels(" docker , zone=a,tier=gold ")
	if err != nil {
		t.Fatal(err)
	}
	if got["docker"] != "true" || got["zone"] != "a" || got["tier"] != "gold" || len(got) != 3 {
		t.Fatalf("parsed %v", got)
	}
	if FormatHostLabels(got) != "docker=true,tier=gold,zone=a" {
		t.Fatalf("formatted %q", FormatHostLabels(got))
	}
	if _, err := ParseHostLabels("Bad Label=1"); err == nil {
		t.Fatal("a bad label name was accepted")
	}
	if m, err := ParseHostLabels(""); err != nil || len(m) != 0 {
		t.Fatalf("empty: %v %v", m, err)
	}
}
