package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// cancel gives a worker a task that runs a 30 s sleep and cancels it once
// the agent runs it: a persistent agent gets an interrupt (its command is
// killed, the process serves on) and the task's one output is cancelled.
func (d *demo) cancel(ctx context.Context, id, project, requestID, agentName string, script stubmodel.Script) error {
	d.tl.section("a cancel: a running " + agentName + " task is ended on request")
	sent, err := d.put(ctx, id, project, requestID, promptLong, script)
	if err != nil {
		return err
	}
	if err := d.tl.waitEvent(ctx, id, protocol.EventTaskStarted, time.Minute); err != nil {
		return err
	}
	if d.stub != nil {
		// The model asked for the sleep: the agent runs it.
		err := poll(ctx, 20*time.Millisecond, time.Minute, func() (bool, error) {
			return strings.Contains(d.lastModelText(), "sleep 30"), nil
		})
		if errors.Is(err, errTimedOut) {
			return fmt.Errorf("task %s: the agent did not start (no model request)", sent.RequestID)
		}
		if err != nil {
			return err
		}
	}
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	d.tl.say("cancel → %s: %s (\"not needed after all\")", sent.Input, sent.RequestID)
	t0 := time.Now()
	if err := d.tasks.Cancel(ctx, sent, "not needed after all"); err != nil {
		return err
	}
	if _, err := d.await(ctx, sent, protocol.StatusCancelled, nil); err != nil {
		return err
	}
	d.tl.say("task %s cancelled %.0f ms after the cancel was sent; the %s process serves on", sent.RequestID, float64(time.Since(t0).Microseconds())/1000, agentName)
	return d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second)
}
