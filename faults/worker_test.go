package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

func TestDockerKillWithTasksQueued(t *testing.T) {
	c := NewCase(t, Options{
		Name:  "docker kill of a long-lived worker, two tasks queued behind its task in flight",
		Fault: "A long-lived worker runs a 4 s task with two more tasks waiting on its input; its container gets `docker kill -s KILL` mid-task.",
		Recovered: "all three tasks answered (the one in flight may fail KILLED; the two queued ones may be answered or served by a replacement), " +
			"within 3 heartbeat intervals + one lease + 10 s of the kill; at most one replacement.",
		Detected: "kill to the answer of the task in flight.",
	})
	c.StartManager("m1", nil)
	w := c.Create(protocol.KindLongLived, 30*time.Second)
	creates := c.WatchCreations()
	inFlight := c.Task(w, "long fake:sleep-4000", AnyAnswer)
	queued := []string{c.Task(w, "queued one", AnyAnswer), c.Task(w, "queued two", AnyAnswer)}
	if _, ok := c.WaitEvent(w, protocol.EventTaskStarted, inFlight, 20*time.Second); !ok {
		t.Fatal("the first task did not start within 20 s")
	}
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	c.Docker("kill", "-s", "KILL", c.ContainerOf(w))

	bound := 3*c.Opt.Heartbeat + c.Lease + 10*time.Second
	ids := append([]string{inFlight}, queued...)
	last, ok := c.WaitAnswered(ids, bound)
	if a := c.First(inFlight); !a.At.IsZero() {
		c.Detection(a.At.Sub(killed))
	}
	if ok {
		c.Recovered(last.Sub(killed))
	} else {
		c.NotRecovered(bound, "tasks of the killed worker unanswered")
	}
	c.Settle()
	c.Unwanted(len(creates.Since(killed))-1, "more than one replacement for the killed worker")
}

func TestParallelDeletes(t *testing.T) {
	const n = 10
	c := NewCase(t, Options{
		Name: "10 parallel deletes",
		Fault: "10 workers (2 s heartbeats) each serve a task and are paused, as the wrapper asks after each output; " +
			"once paused longer than their heartbeat's life, 10 delete commands are sent at once.",
		Recovered: "every delete answered ok within the stop timeout + 15 s, and no worker created in the 3 heartbeat intervals + 6 s after (a replacement of a deleted worker is unwanted).",
		Heartbeat: 2 * time.Second,
	})
	c.StartManager("m1", nil)
	workers := c.CreateMany(n, protocol.KindLongLived, 90*time.Second)
	var tasks []string
	for _, w := range workers {
		tasks = append(tasks, c.Task(w, "one task", Complete))
	}
	if _, ok := c.WaitAnswered(tasks, 30*time.Second); !ok {
		t.Fatal("set-up: the tasks were not answered within 30 s")
	}
	for _, w := range workers {
		if _, ok := c.WaitEvent(w, protocol.EventPaused, "", 20*time.Second); !ok {
			t.Fatalf("set-up: worker %s was not paused after its output within 20 s", w)
		}
	}
	time.Sleep(3*c.Opt.Heartbeat + time.Second) // their heartbeat keys expire while paused
	creates := c.WatchCreations()
	t0 := time.Now()
	var ids []string
	for _, w := range workers {
		ids = append(ids, c.Send(protocol.Command{Action: protocol.ActionDelete, WorkerID: w}, ReplyOK, "delete "+short(w)))
	}
	bound := StopTimeout + 15*time.Second
	last, ok := c.WaitAnswered(ids, bound)
	time.Sleep(3*c.Opt.Heartbeat + 6*time.Second)
	c.Settle()
	made := creates.Since(t0)
	c.Unwanted(len(made), "workers created after the deletes (replacements nobody asked for)")
	switch {
	case !ok:
		c.NotRecovered(bound, "deletes unanswered")
	case len(made) > 0:
		c.NotRecovered(bound, fmt.Sprintf("%d replacements made for deleted workers", len(made)))
	default:
		c.Recovered(last.Sub(t0))
	}
}

func TestWorkerCannotHeartbeat(t *testing.T) {
	const (
		allowed = 4                // the worker and 3 replacements (at most 3, with backoff)
		quiet   = 15 * time.Second // no container made for this long after the last allowed one: left alone
		churn   = 30 * time.Second // watched this long once past the cap, to show the rate
		most    = 90 * time.Second // a backoff may be slow: watched this long at most
	)
	c := NewCase(t, Options{
		Name: "a worker that cannot heartbeat (bad WORKER_REDIS_URL)",
		Fault: "The workers' Redis is an address that nothing answers (their gateway relays redis.sock to 127.0.0.1:1; WORKER_REDIS_URL=redis://127.0.0.1:1/0): " +
			"the worker starts but never beats. Containers made are counted for 30 s once past the cap of 4, else until 15 s pass without one (90 s at most).",
		Recovered: "the create answered; the worker replaced at most 3 times (at most 4 containers made), then left alone for 15 s. " +
			"Recovery time: from the create to the last container made.",
		Detected: "the first container made to the second (the worker judged dead and replaced).",
		Env:      map[string]string{"WORKER_REDIS_URL": "redis://127.0.0.1:1/0"},
	})
	c.StartGateway("127.0.0.1:1") // a sealed worker's Redis is its gateway's upstream
	c.StartManager("m1", nil)
	creates := c.WatchCreations()
	t0 := time.Now()
	id := c.SendCreate(protocol.KindLongLived, AnyAnswer)
	if _, err := c.WaitOne(id, 30*time.Second); err != nil {
		c.Note("the create was not answered within 30 s")
	}
	var made []Created
	for {
		made = creates.Since(t0)
		last := t0
		if len(made) > 0 {
			last = made[len(made)-1].At
		}
		if (len(made) > allowed && time.Since(t0) >= churn) || (len(made) >= allowed && time.Since(last) >= quiet) ||
			time.Since(last) >= 2*quiet || time.Since(t0) >= most {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.Settle()
	if len(made) > 1 {
		c.Detection(made[1].At.Sub(made[0].At))
	}
	c.Note("%d containers made in %s for one create", len(made), roundDur(time.Since(t0)))
	c.Unwanted(len(made)-allowed, "containers made beyond the worker and 3 replacements")
	switch {
	case len(made) == 0:
		c.NotRecovered(most, "no container made at all")
	case len(made) > allowed:
		c.NotRecovered(time.Since(t0), "re-created without end")
	case time.Since(made[len(made)-1].At) < quiet:
		c.NotRecovered(most, "still re-created when the watch ended")
	default:
		c.Recovered(made[len(made)-1].At.Sub(t0))
	}
}

func TestDeveloperBursts(t *testing.T) {
	const bursts, perBurst, workers = 20, 7, 3
	const burstBound = 4 * time.Second
	c := NewCase(t, Options{
		Name: "20 bursts of 7 tasks on 3 developer workers",
		Fault: "Three developer workers share the developer queue; 20 bursts of 7 tasks (fake agent, 200 ms each) are sent, each burst once the " +
			"last is answered or its bound passed. Workers ask to be paused after each output, so a pause races the next task (a worker must never be paused with its task in flight).",
		Recovered: "every task of a burst answered complete within 4 s of the burst (a task answered later, when an unrelated task woke the pool, is lost). " +
			"Recovery time: the slowest burst.",
		MaxWorkers: workers,
	})
	c.StartManager("m1", nil)
	c.CreateMany(workers, protocol.KindDeveloper, 60*time.Second)
	var slowest time.Duration
	stuck := 0
	for b := 0; b < bursts; b++ {
		t0 := time.Now()
		var ids []string
		for i := 0; i < perBurst; i++ {
			ids = append(ids, c.Task("", fmt.Sprintf("burst %d task %d fake:sleep-200", b+1, i+1), Complete))
		}
		last, ok := c.WaitAnswered(ids, burstBound)
		if !ok {
			stuck++
			as := c.answers()
			var missing []string
			for _, id := range ids {
				if len(as[id]) == 0 {
					missing = append(missing, id)
				}
			}
			t.Logf("burst %d: %s unanswered after %s", b+1, strings.Join(missing, ", "), burstBound)
			continue
		}
		slowest = max(slowest, last.Sub(t0))
		time.Sleep(time.Duration(b%4) * 150 * time.Millisecond) // vary where the next burst meets the pauses
	}
	// A last look: a task frozen in a paused worker stays frozen.
	time.Sleep(2 * time.Second)
	c.Settle()
	if stuck > 0 {
		c.NotRecovered(burstBound, fmt.Sprintf("%d of %d bursts not fully answered within %s", stuck, bursts, roundDur(burstBound)))
		return
	}
	c.Recovered(slowest)
}

func TestPauseCommandOnBusyWorker(t *testing.T) {
	c := NewCase(t, Options{
		Name:  "a pause command on a busy long-lived worker",
		Fault: "A client sends `pause` for a long-lived worker while it runs a 4 s task.",
		Recovered: "the pause refused (a reply that is not ok), the task answered complete within its run time + 10 s, and the worker never paused " +
			"while the task ran (no `paused` event between its task_started and its output). Recovery time: pause sent to the task's answer.",
		Detected: "pause sent to its reply.",
	})
	c.StartManager("m1", nil)
	w := c.Create(protocol.KindLongLived, 30*time.Second)
	task := c.Task(w, "long fake:sleep-4000", Complete)
	started, ok := c.WaitEvent(w, protocol.EventTaskStarted, task, 20*time.Second)
	if !ok {
		t.Fatal("set-up: the task did not start within 20 s")
	}
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	pause := c.Send(protocol.Command{Action: protocol.ActionPause, WorkerID: w}, Refused, "pause of a busy worker")
	bound := 4*time.Second + 10*time.Second
	last, ok := c.WaitAnswered([]string{pause, task}, bound)
	c.Settle()
	if a := c.First(pause); !a.At.IsZero() {
		c.Detection(a.At.Sub(t0))
	}
	if at, paused := c.WaitEventSince(started, w, protocol.EventPaused, "", 0); paused && at.Before(c.First(task).At) {
		c.NotRecovered(bound, "the worker was paused with its task in flight")
		return
	}
	if !ok {
		c.NotRecovered(bound, "the pause was not refused, or the task not answered complete")
		return
	}
	c.Recovered(last.Sub(t0))
}

func TestDockerKillOfDeveloperWorkerMidTask(t *testing.T) {
	c := NewCase(t, Options{
		Name: "docker kill of a developer worker mid-task",
		Fault: "Three developer workers share the queue; the one running a 3 s task gets `docker kill -s KILL`. A second task follows. " +
			"A developer task goes back to the queue for another worker (up to 3 deliveries).",
		Recovered:  "both tasks answered complete, once each (the first by another worker), within 3 heartbeat intervals + one lease + 3 s + 10 s of the kill.",
		Detected:   "kill to the task's start on another worker.",
		MaxWorkers: 3,
	})
	c.StartManager("m1", nil)
	c.CreateMany(3, protocol.KindDeveloper, 60*time.Second)
	task := c.Task("", "long fake:sleep-3000", Complete)
	ev, ok := c.Event(time.Time{}, "", protocol.EventTaskStarted, task, 20*time.Second)
	if !ok {
		t.Fatal("set-up: the task did not start within 20 s")
	}
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	c.Docker("kill", "-s", "KILL", c.ContainerOf(ev.WorkerID))
	next := c.Task("", "after the kill", Complete)
	bound := 3*c.Opt.Heartbeat + c.Lease + 13*time.Second
	last, ok := c.WaitAnswered([]string{task, next}, bound)
	c.Settle()
	if again, ok := c.Event(killed, "", protocol.EventTaskStarted, task, 0); ok && again.WorkerID != ev.WorkerID {
		c.Detection(again.Timestamp.Sub(killed))
	}
	if !ok {
		c.NotRecovered(bound, "the killed worker's task was not served by another worker")
		return
	}
	if w := c.First(task).Worker; w == ev.WorkerID {
		c.Note("the task was answered complete by the worker that was killed")
	}
	c.Recovered(last.Sub(killed))
}
