package testkit

import (
	"fmt"
	"testing"
	"time"
)

// RemoveLabelled removes the containers, running or not, and the volumes
// of a label, and nothing else.
func TestRemoveLabelled(t *testing.T) {
	RequireDocker(t)
	if err := runScript(Root() + "/images/build-base.sh"); err != nil {
		t.Fatal(err)
	}
	label := fmt.Sprintf("io.agentvisor.testkit=%d", time.Now().UnixNano())
	other := label + "-other"
	t.Cleanup(func() { RemoveLabelled(other) })
	for _, l := range []string{label, label, other} {
		if out, err := docker("run", "-d", "--label", l, "--network", "none", "--entrypoint", "/bin/sleep", OSBaseImage(), "300"); err != nil {
			t.Fatalf("docker run: %v %s", err, out)
		}
	}
	if out, err := docker("create", "--label", label, OSBaseImage()); err != nil {
		t.Fatalf("docker create: %v %s", err, out)
	}
	if out, err := docker("volume", "create", "--label", label); err != nil {
		t.Fatalf("docker volume create: %v %s", err, out)
	}
	if n := CountLabelled(label); n != 3 {
		t.Fatalf("%d containers of the label, want 3", n)
	}
	RemoveLabelled(label)
	if n := CountLabelled(label); n != 0 {
		t.Fatalf("%d containers of the label left", n)
	}
	if out, _ := docker("volume", "ls", "-q", "--filter", "label="+label); out != "" {
		t.Fatalf("volumes of the label left: %s", out)
	}
	if n := CountLabelled(other); n != 1 {
		t.Fatalf("%d containers of another label, want 1 (untouched)", n)
	}
}
