package faults

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentvisor/agentvisor/testkit"
)

// BaseImage is the worker base the suite's managers build worker images
// on: worker-base as images/worker-base/Dockerfile makes it, with this
// checkout's wrapper, plus the wrapper's fake agent at FakeAgent. Its own
// tag, so that the suite never retags the agentvisor/worker-base:latest
// other tests and sessions use; FAULTS_BASE_IMAGE names another, so that
// two checkouts running the suite on one engine keep their wrappers apart.
var BaseImage = envOr("FAULTS_BASE_IMAGE", "agentvisor/worker-base-faults:latest")

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// FakeAgent is where the fake agent sits in BaseImage; a spec's AGENT_BIN
// points there.
const FakeAgent = testkit.FakeAgentBin

// ManagerBin is where the suite builds the worker-manager.
func ManagerBin() string { return filepath.Join(testkit.Root(), "bin", "worker-manager") }

var (
	buildOnce sync.Once
	buildErr  error
)

// ensureBuilt builds, once per test binary, the OS base (when missing),
// BaseImage, bin/worker-manager and bin/worker-gateway. A build that
// fails fails the test: a case never runs against a stale binary or image.
func ensureBuilt(t testing.TB) {
	t.Helper()
	if err := Build(); err != nil {
		t.Fatalf("faults: build: %v", err)
	}
}

// Build builds, once per process, the OS base (when missing), BaseImage,
// bin/worker-manager and bin/worker-gateway (ensureBuilt for programs:
// cmd/fleet).
func Build() error {
	buildOnce.Do(func() { buildErr = build() })
	return buildErr
}

func build() error {
	if err := testkit.BuildFakeAgentImage(BaseImage, "worker-base-faults"); err != nil {
		return err
	}
	for _, b := range []struct{ module, pkg, out string }{
		{"spawner", "./cmd/worker-manager", ManagerBin()},
		{"gateway", "./cmd/worker-gateway", GatewayBin()},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = filepath.Join(testkit.Root(), b.module)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", filepath.Base(b.out), err, out)
		}
	}
	return nil
}

// ColdBase returns a base image of its own for the case: BaseImage with a
// label no other image has, so that its image ID, hence every worker
// recipe on it, is new and the manager's first create builds its worker
// image cold (no layer of the builder's cache applies). The base and the
// worker images built on it are removed when the case has ended.
func (c *Case) ColdBase() string {
	t := c.T
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	tag := "agentvisor/worker-base-faults:cold-" + nonce
	dir := t.TempDir()
	df := "FROM " + BaseImage + "\nLABEL io.agentvisor.faults.nonce=" + nonce + "\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := testkit.DockerBuild(dir, tag); err != nil {
		t.Fatal(err)
	}
	id, err := docker("image", "inspect", "-f", "{{.Id}}", tag)
	if err != nil {
		t.Fatalf("inspect %s: %v", tag, err)
	}
	baseID := strings.TrimSpace(string(id))
	c.AfterFinish(func() {
		// Worker images name their base's ID in their recipe label.
		ids, _ := docker("images", "-q", "--no-trunc", "--filter", "label=io.agentvisor.managed=true")
		for _, imgID := range strings.Fields(string(ids)) {
			recipe, _ := docker("image", "inspect", "-f", `{{index .Config.Labels "io.agentvisor.recipe"}}`, imgID)
			if strings.Contains(string(recipe), baseID) {
				_, _ = docker("rmi", "-f", imgID)
			}
		}
		_, _ = docker("rmi", "-f", tag)
	})
	return tag
}
