// Package faults is the fault suite of the runtime (`make faults`): each
// case is one Go test that injects a fault an operator meets (a manager
// SIGKILLed mid-create, a Redis outage, a worker killed with tasks queued,
// a reply lost on the wire...) into real worker-manager processes, a real
// Redis and real worker containers whose agent is the wrapper's fake one,
// and counts what users rely on: every request (task or command) answered
// exactly once, no container left behind or made unasked, and a bounded
// recovery. Each case writes a row of FAULTS.md.
//
// The suite is black-box on purpose, so that it outlives rewrites of the
// control plane: it builds bin/worker-manager from spawner/cmd/worker-manager
// and runs it as separate processes (so they can be SIGKILLed or frozen),
// configured by the environment only, and talks to them through Redis only,
// with the names and documents of the protocol package. Containers of a
// case are found by their key-prefix label, unique per case.
//
// The harness (this package's non-test files) holds no case: Case sets up
// one case (its Redis, key prefix, managers and ledger) and tears it down
// even when the test fails; Ledger counts answers per request; Manager is
// one worker-manager process; DockerProxy stands between a manager and the
// Docker engine to hold or act on its calls.
package faults
