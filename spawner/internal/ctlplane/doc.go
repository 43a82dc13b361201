// Package ctlplane names the control plane's own state: what the
// worker-managers share in Redis and on Docker objects so that no promise
// rests on one process's memory. Leases and their names, the admission
// queue and slots, the create-command map, host records, manager records,
// the warm pools' bookkeeping, the last use of images and volumes, the
// Redis users made for workers, and the container and image labels only a
// manager reads.
//
// None of it is part of the contract with consumers or the wrapper: that
// is package protocol and its PROTOCOL.md. The spawner's CONTROLPLANE.md
// says what these records hold and who may touch them. Key names are built
// under the same prefix as protocol.Keys; no other package of the spawner
// spells one by hand.
package ctlplane
