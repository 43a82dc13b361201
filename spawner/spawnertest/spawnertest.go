// Package spawnertest runs a whole worker runtime for the tests of the
// programs built on the spawner (workerctl, the examples): a throwaway
// Redis, the stub model server, the worker images and a worker-manager
// (in this process) over the real Docker engine, with a key prefix of its
// own so that its containers are its own. Everything goes at the test's end.
package spawnertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// Runtime is a running manager and what it uses.
type Runtime struct {
	Redis   *testkit.Redis
	RC      *redis.Client
	Keys    protocol.Keys
	Stub    *stubmodel.Server
	Spawner *spawner.Spawner
	// Gateway serves the sealed workers' sockets (nil when the test named
	// another network mode or a gateway of its own).
	Gateway *gateway.Gateway
	// GatewayDir is the directory the manager's gateway serves
	// (GATEWAY_DIR).
	GatewayDir string
	// DiskDir holds the workers' disks (WORKER_DISK_DIR).
	DiskDir  string
	RedisURL string
	// Env is the environment a program under test needs to reach this
	// runtime: REDIS_URL, WORKER_KEY_PREFIX, ANTHROPIC_BASE_URL, ...
	Env []string

	stopManager func()
}

// StopManager stops the manager as one that died would, leaving its
// workers, their volumes and their Redis users behind (the test's end
// still removes them). It is idempotent.
func (rt *Runtime) StopManager() { rt.stopManager() }

// Start starts a runtime; mod may change the manager's configuration. The
// stub model answers every request with a complete stop output unless the
// test gives it a script.
func Start(t testing.TB, mod func(*spawner.Config)) *Runtime {
	t.Helper()
	testkit.WorkerImages(t)
	r, rc := testkit.StartRedisClient(t)
	stub, err := stubmodel.Start(stubmodel.Script{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	// The manager passes these from its environment to the workers.
	t.Setenv("ANTHROPIC_BASE_URL", stub.URL)
	t.Setenv("DROID_BASE_URL", stub.URL)
	t.Setenv("ANTHROPIC_API_KEY", "sk-stub-0123456789")
	prefix := fmt.Sprintf("st%d", time.Now().UnixNano())
	// Workers are built on the worker-base testkit built from this tree
	// (WORKER_BASE_IMAGE when the test names its own), so that they run
	// this tree's wrapper.
	env := map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": prefix, "WORKER_STOP_TIMEOUT": "12s", "HEARTBEAT_INTERVAL": "2s",
		"WORKER_BASE_IMAGE": testkit.WorkerBaseImage()}
	cfg, err := spawner.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	// Workers are sealed by default: the runtime's own gateway (in this
	// process) serves them, unless mod names a network mode or a gateway
	// of its own.
	gwDir := gatewaytest.Dir(t)
	cfg.GatewayDir = gwDir
	// The workers' disks under a directory of the test's own, which the
	// programs under test (workerctl) are told too.
	cfg.DiskDir = testkit.TempDiskDir(t)
	t.Setenv("WORKER_DISK_DIR", cfg.DiskDir)
	if mod != nil {
		mod(&cfg)
	}
	var gw *gateway.Gateway
	if cfg.NetworkMode == spawner.NetworkSealed && cfg.GatewayDir == gwDir {
		// Started before the manager, so stopped after it (cleanups run
		// last first).
		gw = gatewaytest.Start(t, gateway.Config{Dir: gwDir, Redis: r.Addr, Model: stub.URL})
	}
	dc, err := dockerengine.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if os.Getenv("SPAWNERTEST_LOG") != "" {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	s := spawner.NewDocker(cfg, dc, rc, &images.Builder{Docker: dc, Redis: rc, Keys: cfg.Keys}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = (&spawner.Manager{S: s}).Run(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	// Started when its presence is in Redis: a command sent now is not
	// refused NO_MANAGER.
	testkit.Eventually(t, "the manager's presence", 30*time.Second, func() bool {
		ms, err := spawner.ListManagers(context.Background(), rc, cfg.Keys)
		for _, m := range ms {
			if m.ID == cfg.ManagerID {
				return err == nil
			}
		}
		return false
	})
	t.Cleanup(func() {
		stop()
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = s.Shutdown(sctx)
		// No container or volume of this runtime survives the test.
		testkit.RemoveLabelled(testkit.KeyPrefixLabel(prefix))
	})
	return &Runtime{Redis: r, RC: rc, Keys: cfg.Keys, Stub: stub, Spawner: s, Gateway: gw, GatewayDir: cfg.GatewayDir, DiskDir: cfg.DiskDir, RedisURL: r.URL(), stopManager: stop,
		Env: []string{"REDIS_URL=" + r.URL(), "WORKER_KEY_PREFIX=" + prefix, "WORKER_DISK_DIR=" + cfg.DiskDir, "ANTHROPIC_BASE_URL=" + stub.URL,
			"DROID_BASE_URL=" + stub.URL, "ANTHROPIC_API_KEY=sk-stub-0123456789"}}
}
