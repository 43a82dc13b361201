// Package protocol owns every name and schema that crosses a process
// boundary between the worker-wrapper, the spawner and the services that
// consume their streams: Redis stream and key names, Docker label names,
// event and command schemas, state machines, error codes, the image recipe
// hash and the ALLOWED_COMMANDS matcher.
//
// It depends on the standard library only, so that any Go service can import
// it without pulling in a Redis or Docker client. PROTOCOL.md beside this
// file documents the same contract for consumers in other languages, and the
// JSON Schema files under schema/ are checked against what these encoders
// produce.
package protocol
