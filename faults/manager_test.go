package faults

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

func TestManagerKilledWithCreateQueued(t *testing.T) {
	c := NewCase(t, Options{
		Name: "manager SIGKILL with a create queued (at the limit)",
		Fault: "At MAX_CONCURRENT_WORKERS=2 with 2 workers, a third create queues; the manager is SIGKILLed and restarted " +
			"(same MANAGER_ID, as a supervisor does); a delete frees a slot, then a second delete and a fourth create follow.",
		Recovered: "the queued create answered ok within one lease + 15 s of the kill (its slot freed meanwhile), the fourth create served too " +
			"(no slot held by the dead manager), and a task on each new worker answered complete.",
		MaxWorkers: 2,
		// No spare namespaces: the killed manager's would stay marked for
		// one lease, past this case's end (a known gap of the sweep).
		Env: map[string]string{"SEALED_SPARE_NETNS": "0"},
	})
	m := c.StartManager("m1", nil)
	w := c.CreateMany(2, protocol.KindLongLived, 60*time.Second)
	sent := time.Now()
	queued := c.SendCreate(protocol.KindLongLived, ReplyOK)
	if _, ok := c.WaitEventSince(sent, "", protocol.EventQueued, "", 15*time.Second); !ok {
		t.Fatal("the third create did not queue within 15 s")
	}
	m.Kill()
	killed := time.Now()
	c.StartManager("m1", nil)
	c.Send(protocol.Command{Action: protocol.ActionDelete, WorkerID: w[0]}, ReplyOK, "delete "+short(w[0]))

	bound := c.Lease + 15*time.Second
	var served []string
	a, err := c.WaitOne(queued, bound)
	if err == nil && a.OK {
		served = append(served, a.Worker)
	}
	c.Send(protocol.Command{Action: protocol.ActionDelete, WorkerID: w[1]}, ReplyOK, "delete "+short(w[1]))
	fourth := c.SendCreate(protocol.KindLongLived, ReplyOK)
	b, err4 := c.WaitOne(fourth, 15*time.Second)
	if err4 == nil && b.OK {
		served = append(served, b.Worker)
	}
	var tasks []string
	for _, id := range served {
		tasks = append(tasks, c.Task(id, "after the crash", Complete))
	}
	last, ok := c.WaitAnswered(tasks, 20*time.Second)
	c.Settle()
	switch {
	case err != nil || !a.OK:
		c.NotRecovered(bound, "the queued create was not served after its manager's crash")
	case err4 != nil || !b.OK:
		c.NotRecovered(bound, "a later create was not served (a slot held by the dead manager)")
	case !ok:
		c.NotRecovered(bound, "the new workers did not answer their tasks")
	default:
		c.Recovered(last.Sub(killed))
	}
}

func TestManagerKilledDuringColdBuild(t *testing.T) {
	c := NewCase(t, Options{
		Name: "manager SIGKILL during a cold image build",
		Fault: "At MAX_CONCURRENT_WORKERS=1, a create needs a worker image never built (a base image of its own); 2 s into the build " +
			"(the manager's POST /build seen through a Docker API proxy) the manager is SIGKILLed and restarted (same MANAGER_ID).",
		Recovered: "the create answered ok within 90 s of the kill (a cold build, and one lease), a task on its worker answered complete, " +
			"exactly one container made for it; no slot held by the dead manager's build.",
		MaxWorkers: 1,
		// Nothing else holds the one slot: a create that queues at all
		// queues behind the dead manager's build.
		Env: map[string]string{"WORKER_CREATION_TIMEOUT": "30s"},
	})
	base := c.ColdBase()
	proxy := c.DockerProxy()
	building := make(chan struct{})
	var once sync.Once
	proxy.On("POST", `^/build$`, func() bool { once.Do(func() { close(building) }); return false })
	m := c.StartManager("m1", map[string]string{"DOCKER_HOST": proxy.Host(), "WORKER_BASE_IMAGE": base})
	creates := c.WatchCreations()
	create := c.SendCreate(protocol.KindLongLived, ReplyOK)
	select {
	case <-building:
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not start a build within 30 s")
	}
	time.Sleep(2 * time.Second)
	m.Kill()
	killed := time.Now()
	c.StartManager("m1", map[string]string{"WORKER_BASE_IMAGE": base})

	bound := 90 * time.Second
	a, err := c.WaitOne(create, bound)
	var task string
	if err == nil && a.OK {
		task = c.Task(a.Worker, "after the crash", Complete)
	}
	var last time.Time
	ok := false
	if task != "" {
		last, ok = c.WaitAnswered([]string{task}, 20*time.Second)
	}
	c.Settle()
	c.Unwanted(len(creates.Workers(time.Time{}))-1, "more than one worker made for one create")
	switch {
	case err != nil || !a.OK:
		c.NotRecovered(bound, fmt.Sprintf("the create was not served after the crash (answer: %s)", describe(a, err)))
	case !ok:
		c.NotRecovered(bound, "its worker did not answer its task")
	default:
		c.Recovered(last.Sub(killed))
	}
}

func describe(a Answer, err error) string {
	if err != nil {
		return "none"
	}
	return a.Desc
}

func TestManagerKilledBetweenCreateAndStart(t *testing.T) {
	c := NewCase(t, Options{
		Name: "manager SIGKILL between container create and start",
		Fault: "A Docker API proxy SIGKILLs the manager when it calls ContainerStart of a new worker (the call never reaches the engine): " +
			"the container is left `created`. The manager is restarted (same MANAGER_ID).",
		Recovered: "the create answered within the creation grace + one lease + 15 s of the kill; if ok, its worker runs and answers a task complete; " +
			"no container left in `created`. Then a second create is served (no slot leaked).",
		MaxWorkers: 2,
	})
	proxy := c.DockerProxy()
	var m *Manager
	var mu sync.Mutex
	killedAt := make(chan time.Time, 1)
	var once sync.Once
	proxy.On("POST", `^/containers/[^/]+/start$`, func() bool {
		hit := false
		once.Do(func() {
			hit = true
			mu.Lock()
			mm := m
			mu.Unlock()
			mm.Kill()
			killedAt <- time.Now()
		})
		return hit
	})
	mu.Lock()
	m = c.StartManager("m1", map[string]string{"DOCKER_HOST": proxy.Host()})
	mu.Unlock()
	create := c.SendCreate(protocol.KindLongLived, AnyAnswer)
	var killed time.Time
	select {
	case killed = <-killedAt:
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not start a container within 30 s")
	}
	var states []string
	for _, x := range c.Containers() {
		if x.WorkerID != "" { // not a spare network namespace's holder
			states = append(states, x.State)
		}
	}
	if len(states) != 1 || states[0] != "created" {
		t.Fatalf("after the kill: containers %v, want one created", states)
	}
	c.StartManager("m1", nil)

	bound := CreationGrace + c.Lease + 15*time.Second
	a, err := c.WaitOne(create, bound)
	var task string
	if err == nil && a.OK {
		task = c.Task(a.Worker, "after the crash", Complete)
	}
	ok := task == ""
	var last time.Time
	if task != "" {
		last, ok = c.WaitAnswered([]string{task}, 20*time.Second)
	}
	second := c.SendCreate(protocol.KindLongLived, ReplyOK)
	b, err2 := c.WaitOne(second, 30*time.Second)
	c.Settle()
	stuck := 0
	for _, x := range c.Containers() {
		// A spare namespace's holder may be between its create and start
		// now; one left over counts among the orphans at the end.
		if x.State == "created" && x.WorkerID != "" {
			stuck++
		}
	}
	c.Unwanted(stuck, "containers still `created` (never started)")
	switch {
	case err != nil:
		c.NotRecovered(bound, "the create was never answered")
	case !ok:
		c.NotRecovered(bound, "the create was answered ok but its worker never served its task")
	case err2 != nil || !b.OK:
		c.NotRecovered(bound, fmt.Sprintf("a second create was not served (answer: %s)", describe(b, err2)))
	case stuck > 0:
		c.NotRecovered(bound, "a container stayed `created`")
	default:
		if last.IsZero() {
			last = a.At
		}
		c.Recovered(last.Sub(killed))
	}
}

func TestManagerRestartedUnderAnotherID(t *testing.T) {
	c := NewCase(t, Options{
		Name: "manager restarted under another MANAGER_ID with commands pending",
		Fault: "The manager reads a create, a status and a list command while its Docker calls hang (a Docker API proxy holds them), so the three " +
			"stay pending in its name; it is SIGKILLed and a manager with another MANAGER_ID (a new container's hostname) takes over.",
		Recovered:  "the three commands answered once each within one lease + 15 s of the kill, and a task on the created worker answered complete.",
		MaxWorkers: 3,
	})
	proxy := c.DockerProxy()
	old := c.StartManager("m-old", map[string]string{"DOCKER_HOST": proxy.Host()})
	w := c.Create(protocol.KindLongLived, 30*time.Second)
	proxy.Stall()
	ids := []string{
		c.SendCreate(protocol.KindLongLived, ReplyOK),
		c.Send(protocol.Command{Action: protocol.ActionStatus, WorkerID: w}, ReplyOK, "status "+short(w)),
		c.Send(protocol.Command{Action: protocol.ActionList}, ReplyOK, "list"),
	}
	if !c.waitFor(15*time.Second, func() bool { return c.PendingAt("m-old") >= 3 }) {
		t.Fatalf("the three commands were not delivered to m-old within 15 s (pending %d)", c.PendingAt("m-old"))
	}
	old.Kill()
	killed := time.Now()
	proxy.Release()
	c.StartManager("m-new", nil)

	bound := c.Lease + 15*time.Second
	last, ok := c.WaitAnswered(ids, bound)
	if ok {
		if a := c.First(ids[0]); a.OK {
			task := c.Task(a.Worker, "after the takeover", Complete)
			last, ok = c.WaitAnswered([]string{task}, 20*time.Second)
		}
	}
	c.Settle()
	if ok {
		c.Recovered(last.Sub(killed))
	} else {
		c.NotRecovered(bound, "commands left pending by the dead manager were not answered")
	}
}

func TestSigtermWithCreateQueued(t *testing.T) {
	c := NewCase(t, Options{
		Name: "SIGTERM with a create queued",
		Fault: "At MAX_CONCURRENT_WORKERS=1 with one worker, a second create queues (WORKER_CREATION_TIMEOUT=60s); the manager gets SIGTERM, " +
			"as a supervisor stops it, and is SIGKILLed if it has not exited within the stop timeout + 10 s.",
		Recovered: "the manager exits by itself within the stop timeout + 10 s, the queued create answered (with an error code: nobody serves it), " +
			"its worker removed. Recovery time: SIGTERM to exit.",
		MaxWorkers: 1,
	})
	m := c.StartManager("m1", nil)
	c.Create(protocol.KindLongLived, 30*time.Second)
	sent := time.Now()
	queued := c.SendCreate(protocol.KindLongLived, AnyAnswer)
	if _, ok := c.WaitEventSince(sent, "", protocol.EventQueued, "", 15*time.Second); !ok {
		t.Fatal("the second create did not queue within 15 s")
	}
	bound := StopTimeout + 10*time.Second
	c.L.SetDeadline([]string{queued}, time.Now().Add(bound))
	exited, took := m.Terminate(bound)
	c.Settle()
	if exited {
		c.Recovered(took)
	} else {
		c.NotRecovered(bound, "the manager did not exit within the stop timeout + 10 s of SIGTERM (SIGKILLed)")
	}
}

func TestTwoManagersOneKilled(t *testing.T) {
	c := NewCase(t, Options{
		Name: "two managers on one Redis, one SIGKILLed",
		Fault: "Managers m-a and m-b share one Redis and key prefix. (1) Both alive, a worker's wrapper is frozen (SIGSTOP) with a task in flight " +
			"and one queued: both managers judge it. (2) m-a's Docker calls hang (a Docker API proxy holds them) while status commands arrive, " +
			"so some stay pending in m-a's name; m-a is SIGKILLed. (3) Then another worker is frozen with a task in flight: m-b alone must find it.",
		Recovered: "(1) both tasks answered, at most one replacement made; (2) every command answered within one lease + 15 s of the kill; " +
			"(3) the task answered within 3 heartbeat intervals + one lease + 10 s. Recovery time: (2), kill to the last command's answer.",
		Detected:   "(1), the freeze to the answer of the frozen worker's task in flight.",
		MaxWorkers: 6,
	})
	proxy := c.DockerProxy()
	a := c.StartManager("m-a", map[string]string{"DOCKER_HOST": proxy.Host()})
	c.StartManager("m-b", nil)
	w := c.CreateMany(2, protocol.KindLongLived, 60*time.Second)
	creates := c.WatchCreations()
	judged := 3*c.Opt.Heartbeat + c.Lease + 10*time.Second

	// (1) Every background loop runs in both managers today.
	inFlight := c.Task(w[0], "long fake:sleep-20000", AnyAnswer)
	queued := c.Task(w[0], "queued behind it", AnyAnswer)
	if _, ok := c.WaitEvent(w[0], protocol.EventTaskStarted, inFlight, 20*time.Second); !ok {
		t.Fatal("set-up: the task did not start within 20 s")
	}
	frozen := time.Now()
	c.Docker("kill", "-s", "STOP", c.ContainerOf(w[0]))
	_, ok1 := c.WaitAnswered([]string{inFlight, queued}, judged)
	if a := c.First(inFlight); !a.At.IsZero() {
		c.Detection(a.At.Sub(frozen))
	}
	time.Sleep(2 * time.Second) // a second replacement, if any, is on its way
	made := creates.Since(frozen)
	c.Unwanted(len(made)-1, "more than one replacement for one frozen worker (both managers replaced it)")
	if !ok1 {
		c.Note("(1) the frozen worker's tasks were not answered within %s", roundDur(judged))
	}

	// (2) m-a dies holding commands.
	proxy.Stall()
	var ids []string
	for i := 0; i < 20 && c.PendingAt("m-a") < 2; i++ {
		ids = append(ids, c.Send(protocol.Command{Action: protocol.ActionStatus, WorkerID: w[1]}, ReplyOK, "status "+short(w[1])))
		time.Sleep(200 * time.Millisecond)
	}
	if c.PendingAt("m-a") < 2 {
		t.Fatalf("set-up: m-a holds %d commands after %d were sent, want 2", c.PendingAt("m-a"), len(ids))
	}
	a.Kill()
	killed := time.Now()
	proxy.Release()
	bound := c.Lease + 15*time.Second
	last, ok2 := c.WaitAnswered(ids, bound)

	// (3) m-b alone judges the workers now.
	t3 := c.Task(w[1], "long fake:sleep-20000", AnyAnswer)
	if _, ok := c.WaitEvent(w[1], protocol.EventTaskStarted, t3, 20*time.Second); !ok {
		t.Fatal("set-up: the task did not start within 20 s")
	}
	c.Docker("kill", "-s", "STOP", c.ContainerOf(w[1]))
	_, ok3 := c.WaitAnswered([]string{t3}, judged)
	if !ok3 {
		c.Note("(3) the task of a worker frozen after m-a's death was not answered within %s", roundDur(judged))
	}
	c.Settle()
	switch {
	case !ok2:
		c.NotRecovered(bound, "commands held by the dead manager were not answered")
	case !ok1 || !ok3:
		c.NotRecovered(judged, "a frozen worker's task was not answered")
	default:
		c.Recovered(last.Sub(killed))
	}
}

func TestSlowContainerStart(t *testing.T) {
	const hang = 8 * time.Second
	c := NewCase(t, Options{
		Name: "ContainerStart hangs 8 s (longer than the creation grace)",
		Fault: "A Docker API proxy holds the manager's first ContainerStart for 8 s, past CREATION_GRACE (5 s) and several reconciliations " +
			"(every 2 s): the new container is old enough to look like an orphan while its create is still in flight.",
		Recovered:  "the create answered ok, exactly one container made, and a task on the worker answered complete, within 8 s + 20 s of the create.",
		MaxWorkers: 2,
	})
	proxy := c.DockerProxy()
	var once sync.Once
	proxy.On("POST", `^/containers/[^/]+/start$`, func() bool {
		once.Do(func() { time.Sleep(hang) })
		return false
	})
	c.StartManager("m1", map[string]string{"DOCKER_HOST": proxy.Host()})
	creates := c.WatchCreations()
	t0 := time.Now()
	create := c.SendCreate(protocol.KindLongLived, ReplyOK)
	bound := hang + 20*time.Second
	a, err := c.WaitOne(create, bound)
	ok := false
	var last time.Time
	if err == nil && a.OK {
		task := c.Task(a.Worker, "after the slow start", Complete)
		last, ok = c.WaitAnswered([]string{task}, time.Until(t0.Add(bound)))
	}
	c.Settle()
	c.Unwanted(len(creates.Since(t0))-1, "more than one container made for one create")
	if !ok {
		c.NotRecovered(bound, fmt.Sprintf("the slowly started worker did not serve its task (create answered: %s)", describe(a, err)))
		return
	}
	c.Recovered(last.Sub(t0))
}

func TestManagerKilledMidDelete(t *testing.T) {
	c := NewCase(t, Options{
		Name: "manager SIGKILL in the middle of a delete",
		Fault: "A Docker API proxy SIGKILLs the manager at its first stop or removal of a container, on a delete command; " +
			"the manager is restarted (same MANAGER_ID).",
		Recovered: "the delete answered ok within one lease + 15 s of the kill, the deleted worker's container gone, no replacement made for it, " +
			"and the other worker answers a task complete.",
		MaxWorkers: 3,
	})
	proxy := c.DockerProxy()
	var m *Manager
	var mu sync.Mutex
	armed := make(chan struct{})
	killedAt := make(chan time.Time, 1)
	var once sync.Once
	kill := func() bool {
		select {
		case <-armed:
		default:
			return false
		}
		hit := false
		once.Do(func() {
			hit = true
			mu.Lock()
			mm := m
			mu.Unlock()
			mm.Kill()
			killedAt <- time.Now()
		})
		return hit
	}
	proxy.On("POST", `^/containers/[^/]+/stop$`, kill)
	proxy.On("POST", `^/containers/[^/]+/kill$`, kill)
	proxy.On("DELETE", `^/containers/[^/]+$`, kill)
	mu.Lock()
	m = c.StartManager("m1", map[string]string{"DOCKER_HOST": proxy.Host()})
	mu.Unlock()
	w := c.CreateMany(2, protocol.KindLongLived, 60*time.Second)
	creates := c.WatchCreations()
	close(armed)
	del := c.Send(protocol.Command{Action: protocol.ActionDelete, WorkerID: w[0]}, ReplyOK, "delete "+short(w[0]))
	var killed time.Time
	select {
	case killed = <-killedAt:
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not stop or remove a container within 30 s of the delete")
	}
	c.StartManager("m1", nil)
	bound := c.Lease + 15*time.Second
	last, ok := c.WaitAnswered([]string{del}, bound)
	if !c.waitFor(time.Until(killed.Add(bound)), func() bool { return c.ContainerOf(w[0]) == "" }) {
		c.Unwanted(1, "the deleted worker's container is still there")
		ok = false
	}
	task := c.Task(w[1], "after the crash", Complete)
	_, ok2 := c.WaitAnswered([]string{task}, 15*time.Second)
	time.Sleep(3 * c.Opt.Heartbeat)
	c.Settle()
	c.Unwanted(len(creates.Since(killed)), "workers made after the delete (a replacement of a deleted worker)")
	if !ok || !ok2 {
		c.NotRecovered(bound, "the delete was not carried out after the crash")
		return
	}
	c.Recovered(last.Sub(killed))
}

func TestSigtermDuringCreate(t *testing.T) {
	for _, replacement := range []bool{false, true} {
		stages := []string{"create-late", "create", "start"}
		kind := "create command"
		if replacement {
			kind, stages = "replacement", append(stages, "backoff")
		}
		for _, stage := range stages {
			t.Run(kind+"/"+stage, func(t *testing.T) { sigtermDuringCreate(t, replacement, stage) })
		}
	}
}

// sigtermDuringCreate: the manager gets SIGTERM while a new worker's
// container is being made: the engine's answer to its ContainerCreate is
// held (stage "create": the container exists, the manager does not know
// it), or the ContainerCreate reaches the engine only 2 s late, acted on
// whether or not the manager still waits (stage "create-late"), or its
// ContainerStart is held (stage "start"), or (stage "backoff", a
// replacement) the replacement waits out its backoff (REPLACE_BACKOFF=3s).
// The worker is asked for by a create command, or replaces a dead worker.
func sigtermDuringCreate(t *testing.T, replacement bool, stage string) {
	const hold = 2 * time.Second
	what, call := "a create", "ContainerStart"
	if replacement {
		what = "a replacement"
	}
	switch stage {
	case "create":
		call = "the engine's answer to ContainerCreate"
	case "create-late":
		call = "ContainerCreate (the engine then acts on it, whether the manager still waits or not)"
	}
	fault := fmt.Sprintf("A Docker API proxy holds %s of a new worker for 2 s; the manager gets SIGTERM meanwhile, as a supervisor stops it.", call)
	env := map[string]string{}
	if stage == "backoff" {
		fault = "The manager gets SIGTERM 500 ms after the dead worker's task was answered, while the replacement waits out its backoff (REPLACE_BACKOFF=3s)."
		env["REPLACE_BACKOFF"] = "3s"
	}
	if replacement {
		fault = "A worker's wrapper is frozen (SIGSTOP) with a task in flight and the manager replaces it. " + fault
	}
	c := NewCase(t, Options{Name: fmt.Sprintf("SIGTERM during %s's %s", what,
		map[string]string{"create": "ContainerCreate (answer held)", "create-late": "ContainerCreate (reaching the engine late)",
			"start": "ContainerStart", "backoff": "backoff"}[stage]),
		Fault: fault, Env: env,
		Recovered: "the manager exits by itself within the stop timeout + 10 s, every request answered (the create ok or with an error code; the frozen worker's task), " +
			"and no container left (one made for the new worker is removed with the rest). Recovery time: SIGTERM to exit.",
	})
	proxy := c.DockerProxy()
	armed := make(chan struct{})
	holding := make(chan struct{})
	var once sync.Once
	first := func() bool {
		select {
		case <-armed:
		default:
			return false
		}
		hit := false
		once.Do(func() { hit = true; close(holding) })
		return hit
	}
	switch stage {
	case "create":
		proxy.DelayResponse("POST", `^/containers/create$`, func() time.Duration {
			if first() {
				return hold
			}
			return 0
		})
	case "create-late":
		proxy.DelayRequest("POST", `^/containers/create$`, func() time.Duration {
			if first() {
				return hold
			}
			return 0
		})
	default:
		proxy.On("POST", `^/containers/[^/]+/start$`, func() bool {
			if first() {
				time.Sleep(hold)
			}
			return false
		})
	}
	m := c.StartManager("m1", map[string]string{"DOCKER_HOST": proxy.Host()})
	if replacement {
		w := c.Create(protocol.KindLongLived, 30*time.Second)
		task := c.Task(w, "long fake:sleep-20000", AnyAnswer)
		if _, ok := c.WaitEvent(w, protocol.EventTaskStarted, task, 20*time.Second); !ok {
			t.Fatal("set-up: the task did not start within 20 s")
		}
		if stage != "backoff" {
			close(armed)
		}
		c.Docker("kill", "-s", "STOP", c.ContainerOf(w))
		if stage == "backoff" {
			if _, ok := c.WaitAnswered([]string{task}, 3*c.Opt.Heartbeat+c.Lease+10*time.Second); !ok {
				t.Fatal("the frozen worker's task was not answered")
			}
			close(holding)
		}
	} else {
		close(armed)
		c.SendCreate(protocol.KindLongLived, AnyAnswer)
	}
	select {
	case <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not make a container within 30 s")
	}
	time.Sleep(200 * time.Millisecond)
	if stage == "backoff" {
		time.Sleep(300 * time.Millisecond)
	}
	bound := StopTimeout + 10*time.Second
	var ids []string
	for _, r := range c.L.Requests() {
		ids = append(ids, r.ID)
	}
	c.L.SetDeadline(ids, time.Now().Add(bound))
	exited, took := m.Terminate(bound)
	c.Settle()
	if !exited {
		c.NotRecovered(bound, "the manager did not exit within the stop timeout + 10 s of SIGTERM (SIGKILLed)")
		return
	}
	c.Recovered(took)
}
