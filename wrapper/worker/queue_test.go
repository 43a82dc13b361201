package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// Many tasks of mixed priorities through real Redis and two developer
// workers: high ones finish earlier on average than normal ones, normal
// than low; every task is answered once, and low ones are served while
// high ones still wait (none waits for the queue to empty).
func TestDeveloperQueuePrioritiesUnderLoad(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindDeveloper)
	const perPriority = 20
	prio := map[string]protocol.Priority{}
	for i := range perPriority {
		for _, p := range []protocol.Priority{protocol.PriorityLow, protocol.PriorityNormal, protocol.PriorityHigh} {
			id := fmt.Sprintf("%s-%d", p, i)
			prio[id] = p
			task := protocol.Task{RequestID: id, Prompt: "quick", Priority: p}
			if p == protocol.PriorityNormal && i%2 == 0 {
				task.Priority = "" // no priority is normal
			}
			e.send(e.keys.DeveloperInputFor(task.Priority), task)
		}
	}
	e.start()
	e2 := *e
	e2.cfg.WorkerID = e.cfg.WorkerID + "-b"
	e2.start()
	outs := e.waitOutputs(e.keys.DeveloperOutput(), 3*perPriority, 120*time.Second)
	seen := map[string]int{}
	sum := map[protocol.Priority]int{}
	firstLow, lastHigh := -1, -1
	for i, o := range outs {
		seen[o.RequestID]++
		if o.Status != protocol.StatusComplete {
			t.Fatalf("output %+v", o)
		}
		p := prio[o.RequestID]
		sum[p] += i
		if p == protocol.PriorityLow && firstLow < 0 {
			firstLow = i
		}
		if p == protocol.PriorityHigh {
			lastHigh = i
		}
	}
	if len(seen) != 3*perPriority || len(outs) != 3*perPriority {
		t.Fatalf("%d outputs for %d requests, want each of %d once", len(outs), len(seen), 3*perPriority)
	}
	mean := func(p protocol.Priority) float64 { return float64(sum[p]) / perPriority }
	t.Logf("mean completion rank: high %.1f, normal %.1f, low %.1f; first low at %d, last high at %d",
		mean(protocol.PriorityHigh), mean(protocol.PriorityNormal), mean(protocol.PriorityLow), firstLow, lastHigh)
	if !(mean(protocol.PriorityHigh) < mean(protocol.PriorityNormal) && mean(protocol.PriorityNormal) < mean(protocol.PriorityLow)) {
		t.Errorf("mean completion rank high %.1f, normal %.1f, low %.1f: want increasing",
			mean(protocol.PriorityHigh), mean(protocol.PriorityNormal), mean(protocol.PriorityLow))
	}
	if firstLow < 0 || firstLow > lastHigh {
		t.Errorf("the first low task finished at %d, after the last high one (%d): low starves while high ones wait", firstLow, lastHigh)
	}
}
