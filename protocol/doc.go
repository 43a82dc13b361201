// Package protocol owns every name and schema that crosses a process
// boundary between the worker-wrapper, the spawner and the services that
// consume their streams: Redis stream and key names, event and command
// schemas, hash fields, state machines, error codes, the image recipe hash,
// the ALLOWED_COMMANDS matcher, and the Docker labels tools outside the
// manager select its containers by.
//
// The control plane's own state (leases, admission, host and manager
// records, the labels only a manager reads) is not here: the spawner names
// it in its internal ctlplane package and documents it in
// spawner/CONTROLPLANE.md.
//
// It depends on the standard library only, so that any Go service can import
// it without pulling in a Redis or Docker client (its tests use a JSON
// Schema validator). PROTOCOL.md beside this file documents the same
// contract for consumers in other languages, and the JSON Schema files
// under schema/ are checked against what these encoders produce; what
// only the manager and the wrapper share (Redis users, the image recipe
// hash, secrets in a worker, the labels) is in spawner/INTERNALS.md.
package protocol
