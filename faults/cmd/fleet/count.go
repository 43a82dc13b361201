package main

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/faults"
)

// count stops the managers, counts what was lost, duplicated and left,
// and prints the verdict.
func (r *run) count(ctx context.Context, taskIDs []string, declared time.Duration, c comeback, victim *faults.Host) (bool, error) {
	r.tl.section("clean-up and the count")
	answers, err := r.req.ledger.Answers(ctx)
	if err != nil {
		return false, err
	}
	tally := r.req.ledger.Tally(answers, answers)
	t0 := time.Now()
	r.stopManagers()
	left := 0
	for _, h := range r.fleet.Hosts {
		left += len(r.engineContainers(h))
	}
	r.tl.say("managers stopped (SIGTERM) in %s: %d containers of the fleet left on the %d engines", since(t0), left, r.hosts)
	for _, n := range tally.Notes {
		r.tl.say("  %s", n)
	}
	ok := tally.Lost == 0 && tally.Duplicated == 0 && left == 0 && c.removed && c.landed == victim.ID && c.lastOK == 1 && declared <= 3*r.hb
	verdict := "OK"
	if !ok {
		verdict = "FAILED"
	}
	r.tl.printf("\nfleet %s: %d requests (%d tasks, %d commands) answered once each: lost %d, duplicated %d, orphans %d; "+
		"host-2's workers declared lost %s after the kill (goal ≤ 3 heartbeat intervals, %s); host-2 back in placement; %s in all\n",
		verdict, tally.Sent, len(taskIDs)+1, tally.Sent-len(taskIDs)-1, tally.Lost, tally.Duplicated, left,
		round(declared), round(3*r.hb), since(r.tl.start))
	return ok, nil
}
