// Package spawner is the control plane: it decides which workers run,
// where and why, and keeps what it knows in Redis and in the instances'
// labels. The Spawner holds the worker operations (create, delete,
// pause, unpause, status, retire, replace) over an engine.Engine; each
// background component (commands, crash forwarding, health, wake,
// timeouts, reconciliation, pools, the image GC's loop) is built from
// what it needs (wire.go) and run by Manager, the worker-manager service.
// README.md maps the files.
//
// Its packages:
//   - engine is the seam to what runs worker instances: the Engine
//     interface in the runtime's words, an instance's spec and state, and
//     the sentinel errors an engine's errors wrap.
//   - engine/docker implements Engine over one Docker engine, with the
//     spare network namespaces of sealed workers; its dockertest is an
//     in-memory Docker engine for unit tests.
//   - engine/kubernetes implements Engine over a Kubernetes cluster: a
//     pod per worker incarnation, read through an informer.
//   - fleet is this host's view of a fleet of hosts on one Redis: its
//     id, the live hosts, placement candidates and the router of a
//     request about a worker to the host that serves it.
//   - images builds worker images from their recipe hash (Builder) and
//     removes the stale ones (GC).
//   - ops is the worker-manager's operator endpoint: /metrics and the
//     dashboard behind the operator token, and who acts.
//   - dashboard is the fleet's live page and a page per worker, from
//     which an operator acts.
//   - internal/rdb owns every Redis call and Lua script of the module,
//     one type per command family; a component is given the families
//     it uses.
//   - internal/ctlplane names the control plane's own state in Redis and
//     in labels: leases, admission, hosts, managers, pools.
//
// Outside tests, only engine/docker and images import the Docker SDK
// (seam_test.go). cmd/worker-manager is the service, cmd/workerctl the
// command line, and spawnertest runs a whole runtime for the tests of
// programs built on the spawner.
package spawner
