package main

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// droidWorker creates a Droid worker, gives it a task with a progress
// call, then one to cancel while it runs.
func (d *demo) droidWorker(ctx context.Context) error {
	d.tl.section("a Droid worker")
	spec := protocol.WorkerSpec{AgentType: protocol.AgentDroid, ProjectID: projectDocs, Instructions: instructions,
		AllowedCommands: allowDroid}
	if d.stub == nil {
		// Droid reaches the real API through a custom model: name one the
		// API serves.
		spec.Model = envOr("DEMO_DROID_MODEL", "claude-sonnet-4-5")
	}
	id, err := d.create(ctx, "droid-1", spec)
	if err != nil {
		return err
	}
	if _, err := d.send(ctx, id, projectDocs, "docs-1", promptDroid, scriptDroid); err != nil {
		return err
	}
	if err := d.checkToolResult("docs-1"); err != nil {
		return err
	}
	if err := d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second); err != nil {
		return err
	}
	return d.cancel(ctx, id, projectDocs, "docs-2", "Droid", scriptLong)
}
