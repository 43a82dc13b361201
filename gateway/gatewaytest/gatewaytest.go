// Package gatewaytest starts worker gateways in a test's process, for the
// tests of the programs that serve sealed workers (the spawner, the
// worker-manager, the wrapper's model proxy).
package gatewaytest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
)

// Dir returns a new directory short enough for the gateway's unix sockets
// (a socket's path has at most 107 bytes, which t.TempDir's names may
// exceed), removed when the test ends.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Start starts a gateway of cfg, in a Dir of its own when cfg.Dir is
// empty, stopped when the test ends.
func Start(t testing.TB, cfg gateway.Config) *gateway.Gateway {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = Dir(t)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The test's own context is done by now: the stop gets a bound of its own.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Stop(ctx)
	})
	return g
}
