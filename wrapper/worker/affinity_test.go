package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// Two free developer workers: whichever reads a project's next task from
// the queue, the one that holds the project's session runs it, resuming
// that session (without affinity, the other would run it in a new one
// half of the time).
func TestAffinityGivesAProjectsNextTaskToItsSessionsWorker(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindDeveloper)
	e.start()
	e2 := *e
	e2.cfg.WorkerID = e.cfg.WorkerID + "-b"
	e2.start()
	ctx := context.Background()
	ids := []string{e.cfg.WorkerID, e2.cfg.WorkerID}
	idle := func() bool {
		for _, id := range ids {
			if _, err := e.rc.ZScore(ctx, e.keys.DeveloperIdle(), id).Result(); err != nil {
				return false
			}
		}
		return true
	}
	const tasks = 6
	var first protocol.Output
	for i := range tasks {
		// Both free: the holder is back in the idle set.
		testkit.Eventually(t, "both workers idle", 5*time.Second, idle)
		e.send(e.keys.DeveloperInput(), protocol.Task{RequestID: fmt.Sprintf("a%d", i), ProjectID: "alpha", Prompt: "quick"})
		outs := e.waitOutputs(e.keys.DeveloperOutput(), i+1, 15*time.Second)
		o := outs[i]
		if o.Status != protocol.StatusComplete {
			t.Fatalf("task %d: %+v", i, o)
		}
		if i == 0 {
			first = o
			continue
		}
		if o.WorkerID != first.WorkerID || decision(o) != "resume/continued" || o.SessionID != first.SessionID {
			t.Fatalf("task %d ran on %s (%s, session %s); the session %s is %s's", i, o.WorkerID, decision(o), o.SessionID,
				first.SessionID, first.WorkerID)
		}
		if o.Attempt != 1 {
			t.Errorf("task %d: attempt %d, want 1 (a hand-off is no retry)", i, o.Attempt)
		}
	}
	handed := 0
	for _, l := range e.lifecycleEvents() {
		if l.Event == protocol.EventHandedOff {
			handed++
			if l.Detail["to"] != first.WorkerID || l.WorkerID == first.WorkerID {
				t.Errorf("hand-off %+v", l)
			}
		}
	}
	t.Logf("%d of %d tasks handed to the session's worker", handed, tasks-1)
	// Another project still goes to whichever worker reads it, and a
	// holder that is busy does not get it: both workers serve.
	for i := range 6 {
		e.send(e.keys.DeveloperInput(), protocol.Task{RequestID: fmt.Sprintf("b%d", i), ProjectID: fmt.Sprintf("p%d", i), Prompt: "fake:sleep-300"})
	}
	outs := e.waitOutputs(e.keys.DeveloperOutput(), tasks+6, 30*time.Second)
	workers := map[string]bool{}
	for _, o := range outs[tasks:] {
		workers[o.WorkerID] = true
	}
	if len(workers) != 2 {
		t.Errorf("new projects' tasks ran on %v, want both workers", workers)
	}
}
