package docker

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// seccompDocker is the seccomp profile of a worker that runs containers
// of its own: Podman's default profile with chroot, sethostname,
// setdomainname, setns, mount, umount2, unshare, clone, clone3,
// pivot_root, open_tree, move_mount and mount_setattr allowed whatever
// the capabilities (the worker has none outside the user namespace it
// makes), which setting up an inner container needs; and keyctl,
// syslog, name_to_handle_at and the fs* mount API taken out of what it
// allows (Podman does without them: no keyring, the old mount API).
// What Docker's default refuses for want of a capability stays refused
// (bpf, perf_event_open, the module and kexec calls, open_by_handle_at).
//
//go:embed seccomp_docker.json
var seccompDocker []byte

// seccompDockerOpt is seccompDocker as a security option: compact JSON,
// as the Docker API takes a profile's text.
var seccompDockerOpt = func() string {
	var b bytes.Buffer
	if err := json.Compact(&b, seccompDocker); err != nil {
		panic(fmt.Sprintf("docker: embedded seccomp profile: %v", err))
	}
	return "seccomp=" + b.String()
}()

// containers adds to hc what rootless Podman needs to run containers
// inside a worker's (SECURITY.md, "Docker inside a worker"), and nothing
// else: the worker keeps no-new-privileges, no capabilities and its
// limits.
//   - seccompDocker in place of Docker's default profile;
//   - no masked or read-only paths (the CLI's systempaths=unconfined):
//     /proc and /sys as the kernel shows them, since it
//     lets a user namespace mount a new proc only where no part of the
//     one it can see is covered;
//   - apparmor=unconfined: docker-default refuses every mount (ignored
//     on a host without AppArmor);
//   - a tmpfs at protocol.DockerStorage, the worker's uid's, for the
//     inner images and containers: kernel overlay layers cannot sit on
//     the container's own overlay root, and in memory they count in the
//     worker's memory limit and go with its container.
func containers(spec engine.Spec, hc *container.HostConfig) {
	hc.SecurityOpt = append(hc.SecurityOpt, seccompDockerOpt, "apparmor=unconfined")
	// Empty, not nil: the API's word for the CLI's systempaths=unconfined.
	hc.MaskedPaths, hc.ReadonlyPaths = []string{}, []string{}
	opts := []string{"rw", "nosuid", "nodev", "mode=0700"}
	if uid, gid, ok := strings.Cut(spec.User, ":"); ok {
		opts = append(opts, "uid="+uid, "gid="+gid)
	}
	if spec.Limits.Memory > 0 {
		opts = append(opts, fmt.Sprintf("size=%d", spec.Limits.Memory))
	}
	if hc.Tmpfs == nil {
		hc.Tmpfs = map[string]string{}
	}
	hc.Tmpfs[protocol.DockerStorage] = strings.Join(opts, ",")
}
