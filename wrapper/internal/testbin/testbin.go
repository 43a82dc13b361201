// Package testbin builds the wrapper's programs for tests (the fake agent,
// the worker-wrapper binary) once per test binary, into a temporary
// directory.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Import paths of the programs tests build.
const (
	FakeAgent = "github.com/agentvisor/agentvisor/wrapper/internal/fakeagent"
	FakeACP   = "github.com/agentvisor/agentvisor/wrapper/internal/fakeacp"
	Wrapper   = "github.com/agentvisor/agentvisor/wrapper/cmd/worker-wrapper"
)

// Build compiles each package to dir/name (name -> import path), statically
// (CGO_ENABLED=0) so that the binaries also run in a FROM scratch image.
func Build(dir string, programs map[string]string) error {
	for name, pkg := range programs {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("testbin: build %s: %v\n%s", pkg, err, out)
		}
	}
	return nil
}

// Main builds the programs into a new temporary directory, runs the tests
// with its path, removes it, and exits: call it from TestMain.
func Main(run func() int, programs map[string]string, dir *string) {
	d, err := os.MkdirTemp("", "agentvisor-testbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := Build(d, programs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(d)
		os.Exit(1)
	}
	*dir = d
	code := run()
	os.RemoveAll(d)
	os.Exit(code)
}
