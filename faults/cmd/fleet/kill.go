package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/faults"
	"github.com/agentvisor/agentvisor/protocol"
)

// loadAndKill sends the load and kills the victim host in the middle of
// it; it returns the tasks and how long after the kill the last of the
// victim's workers was declared lost.
func (r *run) loadAndKill(ctx context.Context, ids, victims []string, victim *faults.Host) ([]string, time.Duration, error) {
	r.tl.section(fmt.Sprintf("a load of %d tasks (fake agent, %.1f s each); host-2 dies in the middle of it", r.tasks, float64(r.taskMS)/1000))
	sent := time.Now()
	var taskIDs []string
	for i := 0; i < r.tasks; i++ {
		w := ids[i%len(ids)]
		taskIDs = append(taskIDs, r.req.task(ctx, w, fmt.Sprintf("load %d fake:sleep-%d", i+1, r.taskMS)))
	}
	r.tl.say("%d tasks sent, %d per worker", len(taskIDs), (r.tasks+len(ids)-1)/len(ids))
	for _, w := range victims {
		if err := r.events.waitEvent(ctx, sent, w, protocol.EventTaskStarted, 30*time.Second); err != nil {
			return nil, 0, err
		}
	}
	time.Sleep(700 * time.Millisecond)
	killed, procs, err := victim.Kill()
	if err != nil {
		return nil, 0, err
	}
	r.tl.say("host-2 KILLED: its manager, gateway, dockerd, containerd, shims and containers (%d processes) frozen and SIGKILLed at one instant", procs)
	var declared time.Duration
	for _, w := range victims {
		if err := r.events.waitEvent(ctx, killed, w, protocol.EventHostLost, 3*r.hb+30*time.Second); err != nil {
			return nil, 0, err
		}
		for _, ev := range r.events.since(ctx, killed) {
			if ev.WorkerID == w && ev.Event == protocol.EventHostLost {
				declared = max(declared, ev.Timestamp.Sub(killed))
				break
			}
		}
	}
	all, complete := r.req.awaitAnswers(ctx, taskIDs, 90*time.Second)
	if !all {
		r.tl.say("not every task was answered within 90 s")
	}
	r.tl.say("%d of %d tasks answered: %d complete, %d failed (in flight on host-2 when it died)", r.req.answered(ctx, taskIDs), len(taskIDs), complete, r.req.answered(ctx, taskIDs)-complete)
	return taskIDs, declared, nil
}
