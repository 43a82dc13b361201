package faults

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestRedisKilledWithBusyWorkers(t *testing.T) {
	outages := []time.Duration{20 * time.Second}
	if Long() {
		outages = append(outages, 60*time.Second)
	}
	for _, outage := range outages {
		t.Run(fmt.Sprintf("%.0fs", outage.Seconds()), func(t *testing.T) { redisOutage(t, outage) })
	}
}

// redisOutage: six workers busy with tasks that outlast the outage, and a
// seventh whose container is killed while Redis is down.
func redisOutage(t *testing.T, outage time.Duration) {
	const busy = 6
	work := outage + 8*time.Second
	c := NewCase(t, Options{
		Name: fmt.Sprintf("Redis SIGKILLed for %.0f s, 6 busy workers", outage.Seconds()),
		Fault: fmt.Sprintf("Six healthy workers run tasks of %.0f s; Redis gets SIGKILL and is restarted on its port %.0f s later "+
			"(append-only file: no acknowledged write is lost). 2 s into the outage a seventh worker, also busy, is killed (docker kill -s KILL).",
			work.Seconds(), outage.Seconds()),
		Recovered: "the six tasks answered complete (no healthy worker declared dead, none given a new container) within their run time + 10 s, the killed worker's task " +
			"answered within 4 heartbeat intervals + 5 s of Redis's return, and the killed worker's id, in its one new incarnation, answering a task after it. " +
			"Recovery time: Redis back to the last answer.",
		Detected: "Redis back to the answer of the task of the worker killed during the outage.",
	})
	c.StartManager("m1", nil)
	workers := c.CreateMany(busy+1, protocol.KindLongLived, 60*time.Second)
	var tasks []string
	for _, w := range workers[:busy] {
		tasks = append(tasks, c.Task(w, fmt.Sprintf("long fake:sleep-%d", work.Milliseconds()), Complete))
	}
	doomed := c.Task(workers[busy], fmt.Sprintf("long fake:sleep-%d", work.Milliseconds()), AnyAnswer)
	for i, req := range append(slices.Clone(tasks), doomed) {
		if _, ok := c.WaitEvent(workers[i], protocol.EventTaskStarted, req, 20*time.Second); !ok {
			t.Fatalf("set-up: %s did not start within 20 s", req)
		}
	}
	started := time.Now()
	creates := c.WatchCreations()
	if err := c.Redis.Kill(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	time.Sleep(2 * time.Second)
	c.Docker("kill", "-s", "KILL", c.ContainerOf(workers[busy]))
	time.Sleep(time.Until(down.Add(outage)))
	if err := c.Redis.Start(); err != nil {
		t.Fatalf("restart redis: %v", err)
	}
	up := time.Now()
	t.Logf("redis down for %s", roundDur(up.Sub(down)))

	deadBound := (protocol.HeartbeatTTLIntervals+1)*c.Opt.Heartbeat + 5*time.Second
	_, deadOK := c.WaitAnswered([]string{doomed}, deadBound)
	if a := c.First(doomed); !a.At.IsZero() {
		c.Detection(a.At.Sub(up))
	}
	workBound := time.Until(started.Add(work + 10*time.Second))
	last, ok := c.WaitAnswered(tasks, workBound)
	// The killed worker's identity outlives its container: its id answers.
	after := c.Task(workers[busy], "after the outage", Complete)
	_, afterOK := c.WaitAnswered([]string{after}, 30*time.Second)
	c.Settle()
	alive, reincarnated := 0, 0
	for _, cr := range creates.Since(down) {
		if cr.WorkerID == workers[busy] {
			reincarnated++
		} else {
			alive++
		}
	}
	c.Unwanted(alive, "new containers made for workers that were alive")
	c.Unwanted(reincarnated-1, "more than one new incarnation of the killed worker")
	switch {
	case !deadOK:
		c.NotRecovered(deadBound, "the task of the worker killed during the outage was not answered within 4 heartbeat intervals + 5 s of Redis's return")
	case !ok:
		c.NotRecovered(workBound, "tasks of healthy workers unanswered")
	case !afterOK:
		c.NotRecovered(30*time.Second, "the killed worker's id did not answer a task after its new incarnation")
	default:
		if d := c.First(doomed).At; d.After(last) {
			last = d
		}
		c.Recovered(last.Sub(up))
	}
}

func TestLostXReadGroupReply(t *testing.T) {
	lostReply(t, testkit.DropReply)
}

func TestConnectionResetAfterXReadGroupReply(t *testing.T) {
	lostReply(t, testkit.CutAfterReply)
}

// lostReply puts a loopback TCP proxy between a worker and Redis, which
// breaks the worker's connection at the first XREADGROUP that delivers a
// new entry: how (the reply lost, or passed on and then the connection
// reset) is cut.
func lostReply(t *testing.T, cut testkit.Cut) {
	name, fault := "a lost XREADGROUP reply (connection dropped after Redis delivered a task)",
		"The worker reaches Redis through a loopback TCP proxy (its gateway's upstream, and WORKER_REDIS_URL), which drops the connection as soon as Redis answers the worker's "+
			"first XREADGROUP that delivers a task, before the reply reaches the worker: the task is delivered (pending in the worker's name) "+
			"but the worker never saw it. A second task follows."
	if cut == testkit.CutAfterReply {
		name, fault = "connection reset right after an XREADGROUP reply",
			"The worker reaches Redis through a loopback TCP proxy (its gateway's upstream, and WORKER_REDIS_URL), which passes on the reply of the worker's first XREADGROUP "+
				"that delivers a task, then resets the connection. A second task follows."
	}
	c := NewCase(t, Options{Name: name, Fault: fault,
		Recovered: "both tasks answered complete within 15 s of the cut. Recovery time: cut to the first task's answer."})
	proxy := testkit.StartProxy(t, c.Redis.Addr)
	// The sealed worker's redis.sock is relayed to the proxy, which
	// WORKER_REDIS_URL names as well (the URL the wrapper logs in with).
	c.StartGateway(proxy.Addr)
	c.StartManager("m1", map[string]string{"WORKER_REDIS_URL": proxy.URL()})
	w := c.Create(protocol.KindLongLived, 30*time.Second)
	if _, ok := c.WaitEvent(w, protocol.EventStarted, "", 30*time.Second); !ok {
		t.Fatal("set-up: the worker did not start within 30 s")
	}
	cutAt := make(chan time.Time, 1)
	var armed atomic.Bool // one cut: the connections' goroutines race for it
	armed.Store(true)
	proxy.SetCut(func(r testkit.Reply) testkit.Cut {
		if r.Name() == "XREADGROUP" && !r.Null && !r.Error && slices.Contains(r.Command, ">") && armed.CompareAndSwap(true, false) {
			cutAt <- time.Now()
			return cut
		}
		return testkit.Forward
	})
	first := c.Task(w, "first", Complete)
	var cutTime time.Time
	select {
	case cutTime = <-cutAt:
	case <-time.After(15 * time.Second):
		t.Fatal("the proxy saw no XREADGROUP delivering the task within 15 s")
	}
	second := c.Task(w, "second", Complete)
	bound := 15 * time.Second
	_, ok := c.WaitAnswered([]string{first, second}, bound)
	c.Settle()
	if ok {
		c.Recovered(max(0, c.First(first).At.Sub(cutTime)))
	} else {
		c.NotRecovered(bound, "a task delivered on the broken connection was not answered")
	}
}

func TestPermanentRedisError(t *testing.T) {
	c := NewCase(t, Options{
		Name: "a permanent Redis error (WRONGTYPE on a task's run hash)",
		Fault: "The run hash of a task (worker:run:<request_id>) is a string when the task arrives, so every write of its run answers WRONGTYPE, " +
			"which no retry mends. A second, sound task follows on the same worker.",
		Recovered: "the first task answered once (failed), the second answered complete, both within 15 s: the worker does not wedge. " +
			"Recovery time: first task sent to the second's answer.",
	})
	c.StartManager("m1", nil)
	w := c.Create(protocol.KindLongLived, 30*time.Second)
	if _, ok := c.WaitEvent(w, protocol.EventStarted, "", 30*time.Second); !ok {
		t.Fatal("set-up: the worker did not start within 30 s")
	}
	broken := "task-broken"
	if err := c.RC.Set(context.Background(), c.Keys.Run(broken), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.TaskAs(broken, w, "first", AnyAnswer, "task whose run hash is a string")
	sound := c.Task(w, "second", Complete)
	bound := 15 * time.Second
	last, ok := c.WaitAnswered([]string{broken, sound}, bound)
	c.Settle()
	if ok {
		c.Recovered(last.Sub(t0))
	} else {
		c.NotRecovered(bound, "the worker wedged on a permanent Redis error")
	}
}
