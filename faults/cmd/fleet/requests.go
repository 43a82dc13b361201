package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/faults"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// requests sends the fleet's commands and tasks, each recorded in the
// ledger first, and reads their answers from it. seq, the counter of the
// ids, belongs to the run's goroutine: nothing else sends.
type requests struct {
	rc      *redis.Client
	keys    protocol.Keys
	replies string // the stream the managers reply on
	ledger  *faults.Ledger
	tl      *timeline
	epoch   int64 // the run's start (Unix seconds): ids unique across runs
	seq     int
}

func newRequests(rc *redis.Client, keys protocol.Keys, tl *timeline) *requests {
	replies := keys.Replies("fleet-demo")
	return &requests{rc: rc, keys: keys, replies: replies, ledger: faults.NewLedger(rc, keys, replies), tl: tl, epoch: tl.start.Unix()}
}

// createMany sends n creates at once and waits for their replies.
func (q *requests) createMany(ctx context.Context, n int) ([]string, error) {
	t0 := time.Now()
	var cmds []string
	for i := 0; i < n; i++ {
		spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived}
		cmds = append(cmds, q.send(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, faults.ReplyOK, "create"))
	}
	var ids []string
	var lat []time.Duration
	for _, id := range cmds {
		var a faults.Answer
		if !waitFor(ctx, 90*time.Second, func() bool {
			as, _ := q.ledger.Answers(ctx)
			if len(as[id]) > 0 {
				a = as[id][0]
				return true
			}
			return false
		}) {
			return nil, fmt.Errorf("create %s not answered within 90 s", id)
		}
		if !a.OK {
			return nil, fmt.Errorf("create %s answered %s", id, a.Desc)
		}
		ids = append(ids, a.Worker)
		lat = append(lat, a.At.Sub(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if n > 1 {
		q.tl.say("%d creates answered in %s (the first after %s)", n, round(lat[len(lat)-1]), round(lat[0]))
	}
	return ids, nil
}

// send puts a command on the managers' stream.
func (q *requests) send(ctx context.Context, cmd protocol.Command, expect faults.Expect, what string) string {
	q.seq++
	cmd.ID, cmd.ReplyTo, cmd.Timestamp = fmt.Sprintf("cmd-%d-%d", q.epoch, q.seq), q.replies, time.Now().UTC()
	doc, _ := cmd.Encode()
	q.ledger.Add(&faults.Request{ID: cmd.ID, Command: true, What: what, Expect: expect, Sent: time.Now()})
	q.rc.XAdd(ctx, &redis.XAddArgs{Stream: q.keys.Commands(), Values: protocol.Values(doc)})
	return cmd.ID
}

// task puts a task on a worker's input.
func (q *requests) task(ctx context.Context, worker, prompt string) string {
	q.seq++
	id := fmt.Sprintf("task-%d-%d", q.epoch, q.seq)
	doc, _ := protocol.NewTask(id, prompt).Encode()
	q.ledger.Add(&faults.Request{ID: id, What: "task on " + q.tl.name(worker), Expect: faults.AnyAnswer, Sent: time.Now()})
	q.rc.XAdd(ctx, &redis.XAddArgs{Stream: q.keys.Input(worker), Values: protocol.Values(doc)})
	return id
}

// awaitAnswers waits until every request of ids is answered (or bound),
// printing the count as it grows; it returns whether all were and how
// many complete.
func (q *requests) awaitAnswers(ctx context.Context, ids []string, bound time.Duration) (bool, int) {
	shown := 0
	var complete int
	failed := map[string]bool{}
	all := waitFor(ctx, bound, func() bool {
		as, _ := q.ledger.Answers(ctx)
		n := 0
		complete = 0
		for _, id := range ids {
			if len(as[id]) > 0 {
				n++
				if as[id][0].OK {
					complete++
				} else if !failed[id] {
					failed[id] = true
					q.tl.say("%s (%s) answered %s", id, q.ledger.Get(id).What, as[id][0].Desc)
				}
			}
		}
		if len(ids) > 1 && n >= shown+10 || (n == len(ids) && n > shown && len(ids) > 1) {
			q.tl.say("answered %d/%d", n, len(ids))
			shown = n
		}
		return n == len(ids)
	})
	return all, complete
}

// answered counts the requests of ids answered.
func (q *requests) answered(ctx context.Context, ids []string) int {
	as, _ := q.ledger.Answers(ctx)
	n := 0
	for _, id := range ids {
		if len(as[id]) > 0 {
			n++
		}
	}
	return n
}

// waitFor polls f every 100 ms until it holds, bound passes or ctx ends,
// and reports whether it held.
func waitFor(ctx context.Context, bound time.Duration, f func() bool) bool {
	held := false
	testkit.Poll(bound, 100*time.Millisecond, func() bool { held = f(); return held || ctx.Err() != nil })
	return held
}
