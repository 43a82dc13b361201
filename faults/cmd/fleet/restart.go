package main

import (
	"context"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/faults"
)

// comeback is what the victim host's restart showed.
type comeback struct {
	removed bool   // its old containers were removed
	landed  string // the host a new create was placed on
	lastOK  int    // 1 when the new worker's task was answered complete
	last    string // that task's request id
}

// restart starts the victim's engine and manager again, waits for its
// reconciliation and for it to be live, and sends a create and a task.
func (r *run) restart(ctx context.Context, victim *faults.Host) (comeback, error) {
	var c comeback
	r.tl.section("host-2 restarted: it reconciles, then rejoins placement")
	t0 := time.Now()
	if err := victim.Engine.Start(); err != nil {
		return c, err
	}
	old := r.engineContainers(victim)
	r.tl.say("host-2's engine is back: %d containers of its last life, exited (%s)", len(old), strings.Join(old, ", "))
	m, err := victim.StartManager(r.logDir, victim.ID, r.env)
	if err != nil {
		return c, err
	}
	r.tl.say("host-2: worker-gateway pid %d and worker-manager pid %d started under the same HOST_ID", victim.Gateway().Pid(), m.Pid())
	c.removed = waitFor(ctx, 60*time.Second, func() bool { return len(r.engineContainers(victim)) == 0 })
	if c.removed {
		r.tl.say("host-2 reconciled: its %d old containers removed (their workers were retired and replaced), %s after the restart", len(old), since(t0))
	} else {
		r.tl.say("host-2's old containers are still there after 60 s: %v", r.engineContainers(victim))
	}
	if err := r.waitHosts(ctx, r.hosts, 30*time.Second); err != nil {
		return c, err
	}
	r.tl.say("host-2 live in the fleet's registry again")
	r.tl.say("free slots: %s", r.freeSlots(ctx))
	again, err := r.req.createMany(ctx, 1)
	if err != nil {
		return c, err
	}
	c.landed = r.hostOf(ctx, again[0])
	r.tl.nameWorker(again[0], c.landed)
	r.tl.say("a new create (no placement asked) lands on %s: %s", c.landed, r.tl.name(again[0]))
	c.last = r.req.task(ctx, again[0], "after the restart")
	_, c.lastOK = r.req.awaitAnswers(ctx, []string{c.last}, 30*time.Second)
	r.tl.say("its task answered: %v", c.lastOK == 1)
	return c, nil
}
