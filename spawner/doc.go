// Package spawner will hold the control plane: worker images from
// capability hashes, container lifecycle, limits, crash forwarding and
// reconciliation. It is built in its own issues; this module exists so that
// the workspace layout is in place.
package spawner
