package faults

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// TestHostLostMidLoad is a host lost on a fleet of three simulated hosts
// (Docker engines of their own, one manager each, one Redis): one host
// dies whole (manager, engine, containerd, shims and containers SIGKILLed
// at one instant) while its workers run tasks; it comes back later.
func TestHostLostMidLoad(t *testing.T) {
	if !Long() {
		// The longest case (three engines, a kill and a restart): `make
		// faults` and FAULTS.md have it; `make test` keeps within its 20
		// minutes with the two-host case (fleet_owner_test.go).
		t.Skip("a long case: make faults (FAULTS_LONG=1) runs it")
	}
	const (
		hosts, perHost, maxPerHost = 3, 2, 4
		tasksPerWorker             = 5
		taskMS                     = 1500
		hb                         = 2 * time.Second
	)
	c := NewCase(t, Options{
		Name: "host lost mid-load (3 hosts, one killed whole, then restarted)",
		Fault: fmt.Sprintf("Three hosts, each a Docker engine of its own with one manager (HOST_ID host-1..3, MAX_CONCURRENT_WORKERS=%d, "+
			"heartbeats every %s, HOST_TTL 2 intervals) and one worker-gateway (sealed workers), share one Redis; %d long-lived workers "+
			"are created (spread by free slots), then %d tasks of %.1f s (%d per worker). Once host-2's workers run their tasks, host-2 "+
			"dies: its cgroup (manager, gateway, dockerd, containerd, shims, containers) is frozen and SIGKILLed at one instant. After "+
			"the load, host-2's engine, gateway and manager (same HOST_ID) start again, and a create placed on host-2 follows.",
			maxPerHost, hb, hosts*perHost, hosts*perHost*tasksPerWorker, float64(taskMS)/1000, tasksPerWorker),
		Recovered: "every task answered once within 3 heartbeat intervals + one lease + 45 s of the kill (a task in flight on host-2 may " +
			"fail HOST_LOST; the others wait for their worker's new incarnation); host-2's workers declared lost (`host_lost` event) within 3 heartbeat " +
			"intervals of the kill and each woken under its own id on a surviving host (one new incarnation each, its session restored from the " +
			"session store) and answering a task there; after the restart, host-2's manager removes its old containers before anything else " +
			"runs there (none of them starts a task again), and the " +
			"create placed on host-2 is served there and answers a task. Recovery time: kill to the last task's answer.",
		Detected:   "kill to the last `host_lost` event of host-2's workers (the goal is 3 heartbeat intervals).",
		MaxWorkers: maxPerHost,
		Heartbeat:  hb,
	})
	f := c.Fleet(hosts)
	for _, h := range f.Hosts {
		c.StartHostManager(h, map[string]string{"METRICS_ADDR": "off"})
	}
	ctx := context.Background()

	// Creates, spread by free slots.
	workers := c.CreateMany(hosts*perHost, protocol.KindLongLived, 90*time.Second)
	hostOf := map[string]string{}
	count := map[string]int{}
	for _, w := range workers {
		hostOf[w] = c.RC.HGet(ctx, c.Keys.Status(w), protocol.StatusFieldHost).Val()
		count[hostOf[w]]++
	}
	c.Note("creates placed: %s", hostCounts(count))
	for _, h := range f.Hosts {
		if count[h.ID] != perHost {
			t.Errorf("the %d creates were not spread by free slots: %s", hosts*perHost, hostCounts(count))
			break
		}
	}
	victim := f.Host("host-2")
	var doomed []string // the victim's workers
	for _, w := range workers {
		if hostOf[w] == victim.ID {
			doomed = append(doomed, w)
		}
	}
	if len(doomed) == 0 {
		t.Fatal("no worker was placed on host-2")
	}
	// A hibernated worker of host-2: no container to lose, adopted by the
	// host that handles the loss, woken there by its next task.
	spec := c.Spec(protocol.KindLongLived)
	spec.Placement = &protocol.Placement{Host: victim.ID}
	made := c.Send(protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, ReplyOK, "create of the worker hibernated on host-2")
	a, err := c.WaitOne(made, 60*time.Second)
	if err != nil || !a.OK {
		t.Fatalf("set-up: the create placed on host-2: %v %s", err, a.Desc)
	}
	sleeper := a.Worker
	hib := c.Send(protocol.Command{Action: protocol.ActionHibernate, WorkerID: sleeper}, ReplyOK, "hibernate the worker on host-2")
	if a, err := c.WaitOne(hib, 60*time.Second); err != nil || !a.OK {
		t.Fatalf("set-up: hibernate the worker on host-2: %v %s", err, a.Desc)
	}

	// The load.
	since := time.Now()
	var tasks []string
	for i := 0; i < tasksPerWorker; i++ {
		for _, w := range workers {
			tasks = append(tasks, c.Task(w, fmt.Sprintf("load %d fake:sleep-%d", i+1, taskMS), AnyAnswer))
		}
	}
	for _, w := range doomed {
		if _, ok := c.WaitEventSince(since, w, protocol.EventTaskStarted, "", 30*time.Second); !ok {
			t.Fatalf("set-up: worker %s on host-2 started no task within 30 s", w)
		}
	}
	time.Sleep(700 * time.Millisecond) // mid-task
	killed, procs, err := victim.Kill()
	if err != nil {
		t.Fatal(err)
	}
	c.Note("host-2 killed: %d processes at once", procs)

	// Declared lost within 3 heartbeat intervals.
	var lastLost time.Time
	for _, w := range doomed {
		ev, ok := c.Event(killed, w, protocol.EventHostLost, "", 3*hb+c.Lease+20*time.Second)
		if !ok {
			t.Errorf("worker %s of host-2: no host_lost event", short(w))
			continue
		}
		if ev.Host != victim.ID {
			t.Errorf("worker %s: host_lost event names host %q, want host-2", short(w), ev.Host)
		}
		if ev.Timestamp.After(lastLost) {
			lastLost = ev.Timestamp
		}
	}
	if !lastLost.IsZero() {
		c.Detection(lastLost.Sub(killed))
		if d := lastLost.Sub(killed); d > 3*hb {
			c.Note("host-2's workers declared lost %s after the kill (goal: within 3 heartbeat intervals, %s)", roundDur(d), roundDur(3*hb))
			t.Errorf("host-2's workers declared lost %s after the kill, past 3 heartbeat intervals", roundDur(d))
		}
	}

	bound := 3*hb + c.Lease + 45*time.Second
	last, ok := c.WaitAnswered(tasks, bound)
	if ok {
		c.Recovered(last.Sub(killed))
	} else {
		c.NotRecovered(bound, "tasks unanswered after host-2's death")
	}
	failed := 0
	as := c.answers()
	for _, id := range tasks {
		if a := as[id]; len(a) > 0 && !a[0].OK {
			failed++
			if !strings.Contains(a[0].Desc, string(protocol.CodeHostLost)) && !strings.Contains(a[0].Desc, string(protocol.CodeKilled)) {
				t.Errorf("task %s answered %s", id, a[0].Desc)
			}
		}
	}
	c.Note("%d of %d tasks answered failed (in flight on host-2), the others complete", failed, len(tasks))

	// Replacements: on the surviving hosts, one per lost worker at most.
	replacements := map[string]string{} // worker → host
	for _, ev := range c.Lifecycle(killed) {
		if ev.Event == protocol.EventCreated && ev.Source == protocol.SourceSpawner {
			replacements[ev.WorkerID] = ev.Host
		}
	}
	for w, h := range replacements {
		if h == victim.ID {
			t.Errorf("replacement %s was made on the dead host", short(w))
		}
	}
	c.Unwanted(len(replacements)-len(doomed), "more new incarnations than workers lost")
	// Each of host-2's workers, the hibernated one too, lives on under its
	// id, on a surviving host.
	var after []string
	for _, w := range append(slices.Clone(doomed), sleeper) {
		after = append(after, c.Task(w, "after the loss", Complete))
	}
	if _, ok := c.WaitAnswered(after, 60*time.Second); !ok {
		t.Errorf("host-2's worker ids did not all answer a task after the loss within 60 s")
	}
	for _, w := range append(slices.Clone(doomed), sleeper) {
		if h := c.RC.HGet(ctx, c.Keys.Status(w), protocol.StatusFieldHost).Val(); h == victim.ID {
			t.Errorf("worker %s still placed on the dead host", short(w))
		}
	}

	// host-2 comes back: reconcile first, then placement.
	restarted := time.Now()
	if err := victim.Engine.Start(); err != nil {
		t.Fatal(err)
	}
	old := hostContainers(t, victim, c.Prefix)
	c.StartHostManager(victim, map[string]string{"METRICS_ADDR": "off"})
	if !c.waitFor(CreationGrace+3*c.Lease+20*time.Second, func() bool { return len(hostContainers(t, victim, c.Prefix)) == 0 }) {
		t.Errorf("host-2's old containers not removed after its restart: %v", hostContainers(t, victim, c.Prefix))
	} else {
		c.Note("host-2 restarted: its %d old containers removed in %s", len(old), roundDur(time.Since(restarted)))
	}
	for _, w := range doomed {
		if _, ok := c.WaitEventSince(restarted, w, protocol.EventStarted, "", 0); ok {
			t.Errorf("worker %s started again after its host's restart (an old container of host-2?)", short(w))
		}
		if _, ok := c.WaitEventSince(restarted, w, protocol.EventTaskStarted, "", 0); ok {
			t.Errorf("worker %s ran a task after its host's restart (an old container of host-2?)", short(w))
		}
	}
	create := c.Send(protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, ReplyOK, "create placed on host-2 after its restart")
	a, err = c.WaitOne(create, 60*time.Second)
	if err != nil || !a.OK {
		t.Fatalf("the create placed on host-2 after its restart: %v %s", err, a.Desc)
	}
	if h := c.RC.HGet(ctx, c.Keys.Status(a.Worker), protocol.StatusFieldHost).Val(); h != victim.ID {
		t.Errorf("the create placed on host-2 ran on %q", h)
	}
	task := c.Task(a.Worker, "after the restart", Complete)
	if _, ok := c.WaitAnswered([]string{task}, 30*time.Second); !ok {
		t.Errorf("the task on host-2's new worker was not answered complete within 30 s")
	}
	c.Settle()
}

// Lifecycle returns the case's lifecycle events stored at or after since,
// oldest first, each with its Timestamp set to when Redis stored it.
func (c *Case) Lifecycle(since time.Time) []protocol.Lifecycle {
	msgs, err := c.RC.XRange(context.Background(), c.Keys.Lifecycle(), fmt.Sprintf("%d", since.UnixMilli()), "+").Result()
	if err != nil {
		return nil
	}
	var out []protocol.Lifecycle
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		l, err := protocol.DecodeLifecycle(data)
		if err != nil {
			continue
		}
		l.Timestamp = entryTime(m.ID)
		out = append(out, l)
	}
	return out
}

// hostContainers lists the worker ids of the containers of prefix on a
// host's engine.
func hostContainers(t *testing.T, h *Host, prefix string) []string {
	out, err := h.Engine.Docker("ps", "-a", "--filter", "label="+protocol.LabelKeyPrefix+"="+prefix, "--format", `{{.Label "`+protocol.LabelWorkerID+`"}} {{.State}}`)
	if err != nil {
		t.Errorf("docker ps on %s: %v", h.ID, err)
		return nil
	}
	var ws []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// A line without a worker id (" running") is a spare network
		// namespace's holder (spawner/engine/docker/netns.go): the
		// manager's, not a worker.
		if id, state, ok := strings.Cut(line, " "); ok && id != "" {
			ws = append(ws, id+":"+state)
		}
	}
	return ws
}

func hostCounts(n map[string]int) string {
	var parts []string
	for h, k := range n {
		parts = append(parts, fmt.Sprintf("%s %d", h, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
