// Package spawner is the control plane: worker images from capability
// hashes, containers and their limits, pause and wake, crash forwarding,
// reconciliation, and the worker-manager service over them (Manager).
// The Spawner holds the worker operations; each background component is
// built from what it needs (wire.go). README.md maps the files.
package spawner
