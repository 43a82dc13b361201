// Package faults is the fault suite of the runtime (`make faults`): each
// case is one Go test that injects a fault an operator meets (a manager
// SIGKILLed mid-create, a Redis outage, a worker killed with tasks queued,
// a reply lost on the wire, the worker gateway SIGKILLed...) into real
// worker-manager processes, a real Redis and real worker containers whose
// agent is the wrapper's fake one, and counts what users rely on: every
// request (task or command) answered exactly once, no container left
// behind or made unasked, and a bounded recovery. Each case writes a row of FAULTS.md.
//
// The suite is black-box on purpose, so that it outlives rewrites of the
// control plane: it builds bin/worker-manager from spawner/cmd/worker-manager
// and runs it as separate processes (so they can be SIGKILLed or frozen),
// configured by the environment only, and talks to them through Redis only,
// with the names and documents of the protocol package. Containers of a
// case are found by their key-prefix label, unique per case.
//
// The workers are sealed, as the managers' default is
// (WORKER_NETWORK_MODE=sealed): their containers have no network, and
// their wrappers reach Redis through the unix sockets of a worker-gateway
// process (bin/worker-gateway, built from gateway/cmd/worker-gateway),
// one per host as in production. A case's managers share one host, hence
// one gateway (Case.StartGateway: a short temporary GATEWAY_DIR, relaying
// to the case's Redis, started with the first manager, stopped after the
// final shutdown); each simulated host of a fleet has its own, in the
// host's cgroups so that it dies with the host. With a Sentinel
// deployment (Options.Sentinel) the gateway follows the primary the
// sentinels name.
//
// The harness (this package's non-test files) holds no case: Case (case.go)
// sets up one case (its Redis, key prefix, managers) and tears it down
// even when the test fails, recording its row (table.go); the requests it
// sends and waits for are in requests.go, counted by the Ledger
// (ledger.go: answers per request); Manager (manager.go) is one
// worker-manager process and Gateway (gateway.go) one worker-gateway
// process; DockerProxy (dockerproxy.go) stands between a manager and the
// Docker engine to hold or act on its calls; Creations (events.go) counts
// the containers the engine makes; images.go builds the manager, the
// gateway and the images. Fleet (fleet.go) is several simulated hosts on
// one Redis, each an Engine (engines.go): a dockerd of its own beside the
// default engine, whose processes (dockerd, containerd, shims, containers,
// the host's manager and gateway) live in one cgroup subtree, so that a
// host dies whole at one instant and boots again; cmd/fleet (`make
// fleet`) runs a fleet as a timeline.
//
// The cases are the _test.go files: manager crashes (manager_test.go),
// Redis faults (redis_test.go), the gateway SIGKILLed under load and
// restarted on its directory (gateway_test.go), a Redis Sentinel failover
// mid-load (sentinel_test.go: Options.Sentinel gives a case a primary, a
// replica and three sentinels), worker faults (worker_test.go), and a host
// lost mid-load in a fleet of three (fleet_test.go); engines_test.go
// checks the harness's own promise (nothing of a killed host survives, its
// engine boots again, nothing is left after it), and fleet_bench_test.go
// is the fleet's scale curve of `make bench`.
package faults
