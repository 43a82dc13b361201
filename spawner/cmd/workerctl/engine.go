package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/agentvisor/agentvisor/spawner/images"

	dockerengine "github.com/agentvisor/agentvisor/spawner/engine/docker"

	"github.com/agentvisor/agentvisor/spawner"
)

// engine is a spawner over this host's Docker engine, for the commands
// that act on containers, images and volumes themselves (volumes, gc,
// reconcile). Its configuration is the worker-manager's (the environment,
// spawner.ConfigFromEnv), with --redis and --prefix.
type engine struct {
	cfg spawner.Config
	ops spawner.OpsConfig
	dc  dockerConn
	s   *spawner.Spawner
}

func (c *ctl) engine(ctx context.Context) (*engine, error) {
	cfg, err := spawner.ConfigFromEnv(func(name string) string {
		switch name {
		case "REDIS_URL":
			if c.managerURL != "" {
				return c.managerURL
			}
			return c.redisURL
		case "WORKER_KEY_PREFIX":
			return c.keys.Prefix
		}
		return os.Getenv(name)
	})
	if err != nil {
		return nil, fail(exitUsage, "%v", err)
	}
	ops, err := spawner.OpsConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, fail(exitUsage, "%v", err)
	}
	dc, err := dockerengine.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	s := spawner.NewDocker(cfg, dc, c.rdb, nil, quiet)
	return &engine{cfg: cfg, ops: ops, dc: dc, s: s}, nil
}

func (e *engine) close() { e.dc.Close() }

// dockerConn is what workerctl asks of its Docker engine's connection:
// the engine's calls, the image collector's, and its close.
type dockerConn interface {
	dockerengine.Client
	images.GCClient
	Close() error
}

// withEngine runs fn with an engine and closes it after.
func (c *ctl) withEngine(ctx context.Context, fn func(e *engine) error) error {
	e, err := c.engine(ctx)
	if err != nil {
		return err
	}
	defer e.close()
	return fn(e)
}

// quiet is the library's logger here: workerctl reports what it did
// itself.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
