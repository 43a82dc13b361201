package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// codexWorker runs OpenAI's Codex as a third agent (its persistent
// `codex app-server`, the Responses API through the same sealed gateway
// and the wrapper's proxy): a task with a progress call, then a second
// one that continues its thread. With the real Anthropic API it is left
// out: it needs OpenAI's.
func (d *demo) codexWorker(ctx context.Context) error {
	if d.stub == nil {
		d.tl.say("the Codex worker is left out: it needs the OpenAI API (the stub stands in for both)")
		return nil
	}
	d.tl.section("a third agent: a Codex worker (OpenAI's Responses API, through the same sealed gateway)")
	id, err := d.create(ctx, "codex-1", protocol.WorkerSpec{AgentType: protocol.AgentCodex, ProjectID: projectCodex, Instructions: instructions,
		AllowedCommands: allowCodex, Model: "gpt-stub"})
	if err != nil {
		return err
	}
	o1, err := d.send(ctx, id, projectCodex, "codex-1", promptCodex, scriptCodex)
	if err != nil {
		return err
	}
	o2, err := d.send(ctx, id, projectCodex, "codex-2", promptCodexRecall, scriptCodexRecall)
	if err != nil {
		return err
	}
	if o2.SessionID != o1.SessionID {
		return fmt.Errorf("task codex-2 did not continue codex-1's thread %s: %s", o1.SessionID, o2.SessionID)
	}
	if !strings.Contains(d.lastModelText(), "status.txt with touch") {
		return fmt.Errorf("task codex-2: the model did not get codex-1's turns")
	}
	d.tl.say("thread %s continued: the model got the first task's turns (one codex app-server process served both)", short(o2.SessionID))
	if err := d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second); err != nil {
		return err
	}
	return d.cancel(ctx, id, projectCodex, "codex-3", "codex app-server", scriptCodexLong)
}
