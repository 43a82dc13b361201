// Package wrapper will hold the worker-wrapper: PID 1 of every worker
// container, which runs Claude Code or Factory Droid and speaks the protocol.
// It is built in its own issue; this module exists so that the workspace
// layout is in place.
package wrapper
