package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// hibernated creates n long-lived workers and hibernates them (set-up).
func (c *Case) hibernated(n int) []string {
	c.T.Helper()
	ws := c.CreateMany(n, protocol.KindLongLived, 60*time.Second)
	var ids []string
	for _, w := range ws {
		ids = append(ids, c.Send(protocol.Command{Action: protocol.ActionHibernate, WorkerID: w}, ReplyOK, "hibernate "+short(w)))
	}
	if _, ok := c.WaitAnswered(ids, 60*time.Second); !ok {
		c.T.Fatalf("set-up: %d hibernates not all answered within 60 s", n)
	}
	return ws
}

// TestTwoManagersWakeOneWorker: two managers of one host watch its
// hibernated workers; a task to each wakes it once.
func TestTwoManagersWakeOneWorker(t *testing.T) {
	const n = 3
	c := NewCase(t, Options{
		Name: "two managers of one host wake the same hibernated workers",
		Fault: fmt.Sprintf("Managers m-a and m-b share one Redis, key prefix and host; %d long-lived workers are hibernated, then one task is sent to "+
			"each, and a second task to each at once after it.", n),
		Recovered: "every task answered complete, once, by its worker's id; one new incarnation per worker (a lease makes one wake), within 30 s.",
		Detected:  "none to detect.",
	})
	c.StartManager("m-a", nil)
	c.StartManager("m-b", nil)
	ws := c.hibernated(n)
	creates := c.WatchCreations()
	sent := time.Now()
	var tasks []string
	for _, w := range ws {
		tasks = append(tasks, c.Task(w, "wake up", Complete), c.Task(w, "and another", Complete))
	}
	last, ok := c.WaitAnswered(tasks, 30*time.Second)
	time.Sleep(2 * time.Second) // a second wake, if any, is on its way
	c.Settle()
	per := map[string]int{}
	for _, cr := range creates.Since(sent) {
		per[cr.WorkerID]++
	}
	for _, w := range ws {
		c.Unwanted(per[w]-1, "more than one new incarnation for one wake of "+short(w))
		if per[w] == 0 {
			c.Note("worker %s got no new container", short(w))
		}
	}
	if ok {
		c.Recovered(last.Sub(sent))
	} else {
		c.NotRecovered(30*time.Second, "tasks to hibernated workers unanswered")
	}
}

// TestWakeRacingADelete: a task wakes a hibernated worker while a delete
// of it comes; whichever wins, the task is answered once and no container
// of the worker is left.
func TestWakeRacingADelete(t *testing.T) {
	const n = 4
	c := NewCase(t, Options{
		Name:  "a wake racing a delete of the same hibernated worker",
		Fault: fmt.Sprintf("%d long-lived workers are hibernated; to each, a task and a delete are sent at once (the delete 0, 50, 200 and 800 ms after the task).", n),
		Recovered: "every task answered once (complete when its wake won, WORKER_GONE when the delete did), every delete answered ok, " +
			"and no container of the deleted workers left, within 30 s.",
		Detected: "none to detect.",
	})
	c.StartManager("m1", nil)
	ws := c.hibernated(n)
	sent := time.Now()
	var ids []string
	for i, w := range ws {
		ids = append(ids, c.Task(w, "wake up", AnyAnswer))
		time.Sleep([]time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond, 800 * time.Millisecond}[i])
		ids = append(ids, c.Send(protocol.Command{Action: protocol.ActionDelete, WorkerID: w}, ReplyOK, "delete "+short(w)))
	}
	last, ok := c.WaitAnswered(ids, 30*time.Second)
	c.Settle()
	won := 0
	as := c.answers()
	for i := 0; i < len(ids); i += 2 {
		if a := as[ids[i]]; len(a) > 0 && a[0].OK {
			won++
		}
	}
	c.Note("%d of %d tasks served by their wake before the delete, the others answered WORKER_GONE", won, n)
	if ok {
		c.Recovered(last.Sub(sent))
	} else {
		c.NotRecovered(30*time.Second, "tasks or deletes unanswered")
	}
}
