package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
)

// claudeSpec is the Claude worker of the demo, and the template of its
// warm pool: a create of exactly this spec takes the warm worker. Its
// egress allowlist names the private git host alone.
func (d *demo) claudeSpec() protocol.WorkerSpec {
	return protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: projectShop,
		Capabilities: []protocol.Capability{protocol.CapGit}, Instructions: instructions, AllowedCommands: allowClaude,
		Network: &protocol.Network{Allow: []string{d.git.allow()}}}
}

// awaitWarm waits until the warm pool holds its worker (the first run
// builds the image first).
func (d *demo) awaitWarm(ctx context.Context) error {
	t0 := time.Now()
	err := poll(ctx, 200*time.Millisecond, 5*time.Minute, func() (bool, error) {
		ps, err := spawner.ListPools(ctx, d.rdb, d.keys)
		return err == nil && len(ps) == 1 && ps[0].Warm >= 1, nil
	})
	if errors.Is(err, errTimedOut) {
		return fmt.Errorf("the warm pool did not fill within 5 min (manager log: %s)", d.logPath())
	}
	if err == nil {
		d.tl.say("warm pool claude-shop: a worker of this spec was made ahead, its Claude process started, then paused (%.1fs)", time.Since(t0).Seconds())
	}
	return err
}

// claudeWorker takes the Claude worker from the warm pool, gives it a task
// that commits a file and reports progress, and, once it is paused, a
// second task that resumes its session; then the Claude worker's other
// stages, each a file: egress, gitClone, gitBranch, approval, hibernation.
func (d *demo) claudeWorker(ctx context.Context) error {
	d.tl.section("a Claude worker with the GIT capability")
	if err := d.awaitWarm(ctx); err != nil {
		return err
	}
	id, err := d.create(ctx, "claude-1", d.claudeSpec())
	if err != nil {
		return err
	}
	o1, err := d.send(ctx, id, projectShop, "shop-1", promptCommit, scriptCommit)
	if err != nil {
		return err
	}
	if err := d.checkToolResult("shop-1"); err != nil {
		return err
	}
	if err := d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second); err != nil {
		return err
	}
	st, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionStatus, WorkerID: id})
	if err != nil {
		return err
	}
	d.tl.say("command status: %s is %s (a paused worker uses no CPU and keeps its session)", d.tl.name(id), st.Worker.Status)
	if err := d.wake(ctx, id, o1.SessionID); err != nil {
		return err
	}
	for _, stage := range []func(context.Context, string) error{d.egress, d.gitClone, d.gitBranch, d.approval} {
		if err := stage(ctx, id); err != nil {
			return err
		}
	}
	return d.hibernation(ctx, id, o1.SessionID)
}

// wake gives the paused Claude worker a second task of the same project:
// it unpauses and resumes the first task's session.
func (d *demo) wake(ctx context.Context, id, session string) error {
	d.tl.section("a second task for the same project wakes the worker")
	o, err := d.send(ctx, id, projectShop, "shop-2", promptRecall, scriptRecall)
	if err != nil {
		return err
	}
	if o.SessionID != session || o.Session == nil || o.Session.Action != protocol.SessionResume {
		return fmt.Errorf("task shop-2 did not resume the session of shop-1 (%s): session %s %+v", session, o.SessionID, o.Session)
	}
	if d.stub != nil {
		if !strings.Contains(d.lastModelText(), "add a file hello.txt") {
			return fmt.Errorf("task shop-2: the resumed session did not carry the first task's turns to the model")
		}
		d.tl.say("session %s resumed: the model got the first task's turns with the second prompt", short(o.SessionID))
	} else {
		d.tl.say("session %s resumed", short(o.SessionID))
	}
	return d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second)
}
