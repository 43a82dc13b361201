package testkit

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// dockerTimeout bounds every docker CLI call of the harness but builds.
const dockerTimeout = time.Minute

// docker runs the docker CLI with dockerTimeout and returns its combined
// output, trimmed.
func docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// KeyPrefixLabel is the label filter (key=value) that selects every
// container and volume a spawner made under a Redis key prefix.
func KeyPrefixLabel(prefix string) string { return protocol.LabelKeyPrefix + "=" + prefix }

// RemoveLabelled removes, now, every container (whatever its state) and
// then every volume that carries label (key=value). Errors are ignored: it
// is clean-up, and what it cannot remove a later run's sweep will.
func RemoveLabelled(label string) {
	if out, err := docker("ps", "-aq", "--filter", "label="+label); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = docker("rm", "-f", "-v", id)
		}
	}
	if out, err := docker("volume", "ls", "-q", "--filter", "label="+label); err == nil {
		for _, name := range strings.Fields(out) {
			_, _ = docker("volume", "rm", "-f", name)
		}
	}
}

// CleanupLabelled removes every container and volume that carries label
// when the test ends (RemoveLabelled), so that none outlives it.
func CleanupLabelled(t testing.TB, label string) {
	t.Cleanup(func() { RemoveLabelled(label) })
}

// CountLabelled returns how many containers, whatever their state, carry
// label.
func CountLabelled(label string) int {
	out, _ := docker("ps", "-aq", "--filter", "label="+label)
	return len(strings.Fields(out))
}
