// Package spawner will hold the control plane: worker images from
// capability hashes, container lifecycle, limits, crash forwarding and
// reconciliation. It is built in its own issues; for now its tests check
// the base images that images/ builds.
package spawner
