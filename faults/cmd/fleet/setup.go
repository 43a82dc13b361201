package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/faults"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// The fleet's set-up and its end: the images, a Redis, the engines and a
// manager on each; the managers stopped and the engines removed.

// setUp builds the images and the manager, starts the fleet's Redis, the
// engines and a manager on each; closeAll undoes what was done, even
// after an error.
func (r *run) setUp(ctx context.Context) (closeAll func(), err error) {
	var undo []func()
	closeAll = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	r.tl.section("set-up")
	t0 := time.Now()
	if err := faults.Build(); err != nil {
		return closeAll, err
	}
	r.tl.say("built %s (worker-base with the fake agent) and bin/worker-manager in %s", faults.BaseImage, since(t0))
	// Hold off a test that restarts the default engine (the images come
	// from it) while the fleet runs.
	if unlock, err := testkit.ShareEngineLock(); err == nil {
		undo = append(undo, unlock)
	}
	rs, err := r.startRedis()
	if err != nil {
		return closeAll, err
	}
	undo = append(undo, func() { rs.Stop() }, func() { r.rc.Close() })
	t0 = time.Now()
	tag, err := faults.EnsureWorkerImage(rs.URL(), r.logDir)
	if err != nil {
		return closeAll, err
	}
	r.tl.say("worker image %s ready on the default engine (%s)", tag, since(t0))
	t0 = time.Now()
	if r.fleet, err = faults.NewFleet(r.hosts, faults.BaseImage, tag); err != nil {
		return closeAll, err
	}
	undo = append(undo, r.removeEngines)
	r.tl.say("%d Docker engines side by side (each its own dockerd, containerd, data and exec roots, cgroup), images copied by docker save | load: %s",
		r.hosts, since(t0))
	undo = append(undo, r.stopManagers)
	return closeAll, r.startManagers(ctx, rs.URL())
}

// startRedis starts the fleet's Redis (its data and the managers' logs in
// one temporary directory) and connects to it.
func (r *run) startRedis() (*testkit.Redis, error) {
	var err error
	if r.logDir, err = os.MkdirTemp("", "agentvisor-fleet-logs-"); err != nil {
		return nil, err
	}
	port, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	rs := &testkit.Redis{Dir: r.logDir, Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if err := rs.Start(); err != nil {
		return nil, err
	}
	r.tl.say("redis-server of its own on %s", rs.Addr)
	r.rc = redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 20})
	if r.keys, err = protocol.NewKeys("fleet"); err != nil {
		rs.Stop()
		r.rc.Close()
		return nil, err
	}
	r.req = newRequests(r.rc, r.keys, r.tl)
	r.events = &lifecycle{rc: r.rc, keys: r.keys, tl: r.tl}
	return rs, nil
}

func (r *run) removeEngines() {
	t0 := time.Now()
	if err := r.fleet.Close(); err != nil {
		r.tl.say("removing the engines: %v", err)
	} else {
		r.tl.say("the %d engines stopped and removed (data roots, cgroups, mounts) in %s", r.hosts, since(t0))
	}
}

// startManagers starts a worker-manager on each host and waits until
// every host is live in the fleet's registry.
func (r *run) startManagers(ctx context.Context, redisURL string) error {
	r.env = map[string]string{
		"REDIS_URL": redisURL, "WORKER_KEY_PREFIX": r.keys.Prefix, "MAX_CONCURRENT_WORKERS": fmt.Sprint(r.perHost),
		"HEARTBEAT_INTERVAL": r.hb.String(), "RECONCILE_INTERVAL": "2s", "CREATION_GRACE": faults.CreationGrace.String(),
		"WORKER_STOP_TIMEOUT": faults.StopTimeout.String(), "WORKER_PROJECT_VOLUMES": "false", "WORKER_BASE_IMAGE": faults.BaseImage,
		"WORKER_MEMORY_LIMIT": "256m", "LEASE_TTL": "3s", "METRICS_ADDR": "off",
		"WORKER_ENV": `{"AGENT_BIN":"` + faults.FakeAgent + `","SESSION_POLICY":"new"}`,
	}
	for _, h := range r.fleet.Hosts {
		m, err := h.StartManager(r.logDir, h.ID, r.env)
		if err != nil {
			return err
		}
		r.tl.say("%s: worker-manager pid %d (HOST_ID %s, MAX_CONCURRENT_WORKERS %d, DOCKER_HOST %s); sealed workers, worker-gateway pid %d (GATEWAY_DIR %s)",
			h.ID, m.Pid(), h.ID, r.perHost, h.Engine.Host(), h.Gateway().Pid(), h.GatewayDir)
	}
	if err := r.waitHosts(ctx, r.hosts, 30*time.Second); err != nil {
		return err
	}
	r.tl.say("%d hosts live in the fleet's registry (%s)", r.hosts, r.keys.Hosts())
	return nil
}

// stopManagers stops every running manager as a supervisor does (SIGTERM:
// each removes its workers).
func (r *run) stopManagers() {
	var wg sync.WaitGroup
	for _, h := range r.fleet.Hosts {
		if m := h.Manager(); m != nil && m.Running() {
			wg.Add(1)
			go func() { defer wg.Done(); m.Terminate(faults.StopTimeout + 10*time.Second) }()
		}
	}
	wg.Wait()
}
