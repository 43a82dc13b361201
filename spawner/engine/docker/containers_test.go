package docker

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// Only a worker that runs containers of its own gets the relaxations,
// and it keeps the hardening every worker has.
func TestContainersRelaxOnlyWhatPodmanNeeds(t *testing.T) {
	spec := engine.Spec{Name: "agentvisor-w1", Image: "worker", User: "1000:1000", Network: engine.Sealed, Limits: engine.Limits{Memory: 1 << 30}}
	_, plain := config(spec, "", nil)
	if len(plain.SecurityOpt) != 1 || plain.SecurityOpt[0] != "no-new-privileges" || len(plain.Tmpfs) != 0 || plain.MaskedPaths != nil || plain.ReadonlyPaths != nil {
		t.Fatalf("a plain worker: security %v, tmpfs %v", plain.SecurityOpt, plain.Tmpfs)
	}
	spec.Containers = true
	_, hc := config(spec, "", nil)
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges") || !slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != 0 ||
		hc.Privileged || len(hc.Devices) != 0 || hc.NetworkMode != "none" {
		t.Fatalf("a DOCKER worker lost its hardening: %+v", hc)
	}
	if !slices.Contains(hc.SecurityOpt, "apparmor=unconfined") || hc.MaskedPaths == nil || len(hc.MaskedPaths) != 0 || hc.ReadonlyPaths == nil || len(hc.ReadonlyPaths) != 0 {
		t.Fatalf("security %v, masked %v, read-only %v", hc.SecurityOpt, hc.MaskedPaths, hc.ReadonlyPaths)
	}
	if got := hc.Tmpfs[protocol.DockerStorage]; got != "rw,nosuid,nodev,mode=0700,uid=1000,gid=1000,size=1073741824" {
		t.Fatalf("storage tmpfs %q", got)
	}
	var profile struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names    []string        `json:"names"`
			Action   string          `json:"action"`
			Includes json.RawMessage `json:"includes"`
			Excludes json.RawMessage `json:"excludes"`
		} `json:"syscalls"`
	}
	for _, o := range hc.SecurityOpt {
		if p, ok := strings.CutPrefix(o, "seccomp="); ok {
			if err := json.Unmarshal([]byte(p), &profile); err != nil {
				t.Fatal(err)
			}
		}
	}
	allowed := map[string]bool{} // allowed whatever the capabilities and architecture
	for _, s := range profile.Syscalls {
		unconditional := (len(s.Includes) == 0 || string(s.Includes) == "{}") && (len(s.Excludes) == 0 || string(s.Excludes) == "{}")
		if s.Action == "SCMP_ACT_ALLOW" && unconditional {
			for _, n := range s.Names {
				allowed[n] = true
			}
		}
	}
	if profile.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Fatalf("default action %q", profile.DefaultAction)
	}
	for _, n := range []string{"mount", "umount2", "unshare", "setns", "clone", "clone3", "pivot_root", "chroot", "sethostname", "open_tree", "move_mount", "mount_setattr"} {
		if !allowed[n] {
			t.Errorf("%s is not allowed", n)
		}
	}
	for _, n := range []string{"keyctl", "add_key", "syslog", "name_to_handle_at", "open_by_handle_at", "bpf", "perf_event_open", "init_module", "finit_module", "kexec_load", "fsopen", "fsmount", "userfaultfd"} {
		if allowed[n] {
			t.Errorf("%s is allowed", n)
		}
	}
}
