// Command fleet shows a fleet at work on one machine, as one timeline
// (`make fleet`): three simulated hosts, each a Docker engine of its own
// (dockerd, containerd, data root) with a worker-manager (HOST_ID host-1,
// host-2, host-3) and a worker-gateway (the workers are sealed: their
// containers have no network, their wrappers reach Redis through the
// host's gateway), on one Redis it starts itself; creates spread by free
// slots; a load of tasks for the wrapper's fake agent; host-2 killed whole
// in the middle of it (manager, gateway, engine, containerd, shims and
// containers SIGKILLed at one instant, as a machine that loses power); every task
// answered exactly once; host-2 restarted, reconciled (its old containers
// removed) and back in placement (the next create lands on it). It ends
// with a summary line and exits 1 unless nothing was lost, duplicated or
// left behind.
//
// It runs from the repository's top directory, as root, after `make
// setup`; it builds what it needs (faults.Build).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/faults"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

func main() {
	hosts := flag.Int("hosts", 3, "simulated hosts (Docker engines)")
	perHost := flag.Int("max-workers", 4, "MAX_CONCURRENT_WORKERS of each host")
	workers := flag.Int("workers", 6, "workers to create")
	tasks := flag.Int("tasks", 30, "tasks to send, spread over the workers")
	taskMS := flag.Int("task-ms", 1500, "how long the fake agent works on a task")
	heartbeat := flag.Duration("heartbeat", 2*time.Second, "HEARTBEAT_INTERVAL of the managers (HOST_TTL is two of them)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r := &run{out: os.Stdout, start: time.Now(), hosts: *hosts, perHost: *perHost, workers: *workers, tasks: *tasks,
		taskMS: *taskMS, hb: *heartbeat, names: map[string]string{}}
	ok, err := r.run(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nfleet FAILED: %v\n", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

type run struct {
	out                                    io.Writer
	start                                  time.Time
	hosts, perHost, workers, tasks, taskMS int
	hb                                     time.Duration

	rc      *redis.Client
	keys    protocol.Keys
	replies string
	ledger  *faults.Ledger
	fleet   *faults.Fleet
	logDir  string
	env     map[string]string
	seq     int

	mu    sync.Mutex
	names map[string]string // worker id → "w3@host-2"
}

func (r *run) say(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.out, "%6.1fs  %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *run) section(title string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.out, "\n== %s\n", title)
}

func (r *run) name(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.names[id]; ok {
		return n
	}
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func (r *run) run(ctx context.Context) (bool, error) {
	closeAll, err := r.setUp(ctx)
	defer closeAll()
	if err != nil {
		return false, err
	}
	events := r.follow(ctx)
	defer events()
	ids, perHost, err := r.spread(ctx)
	if err != nil {
		return false, err
	}
	victim := r.fleet.Host("host-2")
	taskIDs, declared, err := r.loadAndKill(ctx, ids, perHost[victim.ID], victim)
	if err != nil {
		return false, err
	}
	back, err := r.restart(ctx, victim)
	if err != nil {
		return false, err
	}
	return r.count(ctx, taskIDs, declared, back, victim)
}

// setUp builds the images and the manager, starts the fleet's Redis, the
// engines and a manager on each; closeAll undoes what was done, even
// after an error.
func (r *run) setUp(ctx context.Context) (closeAll func(), err error) {
	var undo []func()
	closeAll = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	r.section("set-up")
	t0 := time.Now()
	if err := faults.Build(); err != nil {
		return closeAll, err
	}
	r.say("built %s (worker-base with the fake agent) and bin/worker-manager in %s", faults.BaseImage, since(t0))
	// Hold off a test that restarts the default engine (the images come
	// from it) while the fleet runs.
	if unlock, err := testkit.ShareEngineLock(); err == nil {
		undo = append(undo, unlock)
	}
	rs, err := r.startRedis()
	if err != nil {
		return closeAll, err
	}
	undo = append(undo, func() { rs.Stop() }, func() { r.rc.Close() })
	t0 = time.Now()
	tag, err := faults.EnsureWorkerImage(rs.URL(), r.logDir)
	if err != nil {
		return closeAll, err
	}
	r.say("worker image %s ready on the default engine (%s)", tag, since(t0))
	t0 = time.Now()
	if r.fleet, err = faults.NewFleet(r.hosts, faults.BaseImage, tag); err != nil {
		return closeAll, err
	}
	undo = append(undo, r.removeEngines)
	r.say("%d Docker engines side by side (each its own dockerd, containerd, data and exec roots, cgroup), images copied by docker save | load: %s",
		r.hosts, since(t0))
	undo = append(undo, r.stopManagers)
	return closeAll, r.startManagers(ctx, rs.URL())
}

// startRedis starts the fleet's Redis (its data and the managers' logs in
// one temporary directory) and connects to it.
func (r *run) startRedis() (*testkit.Redis, error) {
	var err error
	if r.logDir, err = os.MkdirTemp("", "agentvisor-fleet-logs-"); err != nil {
		return nil, err
	}
	port, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	rs := &testkit.Redis{Dir: r.logDir, Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	if err := rs.Start(); err != nil {
		return nil, err
	}
	r.say("redis-server of its own on %s", rs.Addr)
	r.rc = redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 20})
	if r.keys, err = protocol.NewKeys("fleet"); err != nil {
		rs.Stop()
		r.rc.Close()
		return nil, err
	}
	r.replies = r.keys.Replies("fleet-demo")
	r.ledger = faults.NewLedger(r.rc, r.keys, r.replies)
	return rs, nil
}

func (r *run) removeEngines() {
	t0 := time.Now()
	if err := r.fleet.Close(); err != nil {
		r.say("removing the engines: %v", err)
	} else {
		r.say("the %d engines stopped and removed (data roots, cgroups, mounts) in %s", r.hosts, since(t0))
	}
}

// startManagers starts a worker-manager on each host and waits until
// every host is live in the fleet's registry.
func (r *run) startManagers(ctx context.Context, redisURL string) error {
	r.env = map[string]string{
		"REDIS_URL": redisURL, "WORKER_KEY_PREFIX": r.keys.Prefix, "MAX_CONCURRENT_WORKERS": fmt.Sprint(r.perHost),
		"HEARTBEAT_INTERVAL": r.hb.String(), "RECONCILE_INTERVAL": "2s", "CREATION_GRACE": faults.CreationGrace.String(),
		"WORKER_STOP_TIMEOUT": faults.StopTimeout.String(), "WORKER_PROJECT_VOLUMES": "false", "WORKER_BASE_IMAGE": faults.BaseImage,
		"WORKER_MEMORY_LIMIT": "256m", "LEASE_TTL": "3s", "METRICS_ADDR": "off",
		"WORKER_ENV": `{"AGENT_BIN":"` + faults.FakeAgent + `","SESSION_POLICY":"new"}`,
	}
	for _, h := range r.fleet.Hosts {
		m, err := h.StartManager(r.logDir, h.ID, r.env)
		if err != nil {
			return err
		}
		r.say("%s: worker-manager pid %d (HOST_ID %s, MAX_CONCURRENT_WORKERS %d, DOCKER_HOST %s); sealed workers, worker-gateway pid %d (GATEWAY_DIR %s)",
			h.ID, m.Pid(), h.ID, r.perHost, h.Engine.Host(), h.Gateway().Pid(), h.GatewayDir)
	}
	if err := r.waitHosts(ctx, r.hosts, 30*time.Second); err != nil {
		return err
	}
	r.say("%d hosts live in the fleet's registry (%s)", r.hosts, r.keys.Hosts())
	return nil
}

// spread creates the workers at once and shows where they were placed.
func (r *run) spread(ctx context.Context) ([]string, map[string][]string, error) {
	r.section(fmt.Sprintf("%d creates on %d hosts of %d slots each: placed on the host with the most free slots", r.workers, r.hosts, r.perHost))
	ids, err := r.createMany(ctx, r.workers)
	if err != nil {
		return nil, nil, err
	}
	perHost := map[string][]string{}
	for _, id := range ids {
		h := r.hostOf(ctx, id)
		perHost[h] = append(perHost[h], id)
		r.nameWorker(id, h)
	}
	var counts []string
	for _, h := range r.fleet.Hosts {
		var names []string
		for _, id := range perHost[h.ID] {
			names = append(names, r.name(id))
		}
		counts = append(counts, fmt.Sprintf("%s %d", h.ID, len(perHost[h.ID])))
		r.say("%s runs %d workers: %s", h.ID, len(perHost[h.ID]), strings.Join(names, " "))
	}
	r.say("spread: %s", strings.Join(counts, ", "))
	return ids, perHost, nil
}

func (r *run) nameWorker(id, host string) {
	r.mu.Lock()
	r.names[id] = fmt.Sprintf("w%d@%s", len(r.names)+1, host)
	r.mu.Unlock()
}

// loadAndKill sends the load and kills the victim host in the middle of
// it; it returns the tasks and how long after the kill the last of the
// victim's workers was declared lost.
func (r *run) loadAndKill(ctx context.Context, ids, victims []string, victim *faults.Host) ([]string, time.Duration, error) {
	r.section(fmt.Sprintf("a load of %d tasks (fake agent, %.1f s each); host-2 dies in the middle of it", r.tasks, float64(r.taskMS)/1000))
	sent := time.Now()
	var taskIDs []string
	for i := 0; i < r.tasks; i++ {
		w := ids[i%len(ids)]
		taskIDs = append(taskIDs, r.task(ctx, w, fmt.Sprintf("load %d fake:sleep-%d", i+1, r.taskMS)))
	}
	r.say("%d tasks sent, %d per worker", len(taskIDs), (r.tasks+len(ids)-1)/len(ids))
	for _, w := range victims {
		if err := r.waitEvent(ctx, sent, w, protocol.EventTaskStarted, 30*time.Second); err != nil {
			return nil, 0, err
		}
	}
	time.Sleep(700 * time.Millisecond)
	killed, procs, err := victim.Kill()
	if err != nil {
		return nil, 0, err
	}
	r.say("host-2 KILLED: its manager, gateway, dockerd, containerd, shims and containers (%d processes) frozen and SIGKILLed at one instant", procs)
	var declared time.Duration
	for _, w := range victims {
		if err := r.waitEvent(ctx, killed, w, protocol.EventHostLost, 3*r.hb+30*time.Second); err != nil {
			return nil, 0, err
		}
		for _, ev := range r.lifecycle(ctx, killed) {
			if ev.WorkerID == w && ev.Event == protocol.EventHostLost {
				declared = max(declared, ev.Timestamp.Sub(killed))
				break
			}
		}
	}
	all, complete := r.awaitAnswers(ctx, taskIDs, 90*time.Second)
	if !all {
		r.say("not every task was answered within 90 s")
	}
	r.say("%d of %d tasks answered: %d complete, %d failed (in flight on host-2 when it died)", r.answered(ctx, taskIDs), len(taskIDs), complete, r.answered(ctx, taskIDs)-complete)
	return taskIDs, declared, nil
}

// comeback is what the victim host's restart showed.
type comeback struct {
	removed bool   // its old containers were removed
	landed  string // the host a new create was placed on
	lastOK  int    // 1 when the new worker's task was answered complete
	last    string // that task's request id
}

// restart starts the victim's engine and manager again, waits for its
// reconciliation and for it to be live, and sends a create and a task.
func (r *run) restart(ctx context.Context, victim *faults.Host) (comeback, error) {
	var c comeback
	r.section("host-2 restarted: it reconciles, then rejoins placement")
	t0 := time.Now()
	if err := victim.Engine.Start(); err != nil {
		return c, err
	}
	old := r.engineContainers(victim)
	r.say("host-2's engine is back: %d containers of its last life, exited (%s)", len(old), strings.Join(old, ", "))
	m, err := victim.StartManager(r.logDir, victim.ID, r.env)
	if err != nil {
		return c, err
	}
	r.say("host-2: worker-gateway pid %d and worker-manager pid %d started under the same HOST_ID", victim.Gateway().Pid(), m.Pid())
	c.removed = r.waitFor(ctx, 60*time.Second, func() bool { return len(r.engineContainers(victim)) == 0 })
	if c.removed {
		r.say("host-2 reconciled: its %d old containers removed (their workers were retired and replaced), %s after the restart", len(old), since(t0))
	} else {
		r.say("host-2's old containers are still there after 60 s: %v", r.engineContainers(victim))
	}
	if err := r.waitHosts(ctx, r.hosts, 30*time.Second); err != nil {
		return c, err
	}
	r.say("host-2 live in the fleet's registry again")
	r.say("free slots: %s", r.freeSlots(ctx))
	again, err := r.createMany(ctx, 1)
	if err != nil {
		return c, err
	}
	c.landed = r.hostOf(ctx, again[0])
	r.nameWorker(again[0], c.landed)
	r.say("a new create (no placement asked) lands on %s: %s", c.landed, r.name(again[0]))
	c.last = r.task(ctx, again[0], "after the restart")
	_, c.lastOK = r.awaitAnswers(ctx, []string{c.last}, 30*time.Second)
	r.say("its task answered: %v", c.lastOK == 1)
	return c, nil
}

// count stops the managers, counts what was lost, duplicated and left,
// and prints the verdict.
func (r *run) count(ctx context.Context, taskIDs []string, declared time.Duration, c comeback, victim *faults.Host) (bool, error) {
	r.section("clean-up and the count")
	answers, err := r.ledger.Answers(ctx)
	if err != nil {
		return false, err
	}
	tally := r.ledger.Tally(answers, answers)
	t0 := time.Now()
	r.stopManagers()
	left := 0
	for _, h := range r.fleet.Hosts {
		left += len(r.engineContainers(h))
	}
	r.say("managers stopped (SIGTERM) in %s: %d containers of the fleet left on the %d engines", since(t0), left, r.hosts)
	for _, n := range tally.Notes {
		r.say("  %s", n)
	}
	ok := tally.Lost == 0 && tally.Duplicated == 0 && left == 0 && c.removed && c.landed == victim.ID && c.lastOK == 1 && declared <= 3*r.hb
	verdict := "OK"
	if !ok {
		verdict = "FAILED"
	}
	fmt.Fprintf(r.out, "\nfleet %s: %d requests (%d tasks, %d commands) answered once each: lost %d, duplicated %d, orphans %d; "+
		"host-2's workers declared lost %s after the kill (goal ≤ 3 heartbeat intervals, %s); host-2 back in placement; %s in all\n",
		verdict, tally.Sent, len(taskIDs)+1, tally.Sent-len(taskIDs)-1, tally.Lost, tally.Duplicated, left,
		round(declared), round(3*r.hb), since(r.start))
	return ok, nil
}

// createMany sends n creates at once and waits for their replies.
func (r *run) createMany(ctx context.Context, n int) ([]string, error) {
	t0 := time.Now()
	var cmds []string
	for i := 0; i < n; i++ {
		spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived}
		cmds = append(cmds, r.send(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, faults.ReplyOK, "create"))
	}
	var ids []string
	var lat []time.Duration
	for _, id := range cmds {
		var a faults.Answer
		if !r.waitFor(ctx, 90*time.Second, func() bool {
			as, _ := r.ledger.Answers(ctx)
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
		r.say("%d creates answered in %s (the first after %s)", n, round(lat[len(lat)-1]), round(lat[0]))
	}
	return ids, nil
}

func (r *run) send(ctx context.Context, cmd protocol.Command, expect faults.Expect, what string) string {
	r.seq++
	cmd.ID, cmd.ReplyTo, cmd.Timestamp = fmt.Sprintf("cmd-%d-%d", r.start.Unix(), r.seq), r.replies, time.Now().UTC()
	doc, _ := cmd.Encode()
	r.ledger.Add(&faults.Request{ID: cmd.ID, Command: true, What: what, Expect: expect, Sent: time.Now()})
	r.rc.XAdd(ctx, &redis.XAddArgs{Stream: r.keys.Commands(), Values: protocol.Values(doc)})
	return cmd.ID
}

func (r *run) task(ctx context.Context, worker, prompt string) string {
	r.seq++
	id := fmt.Sprintf("task-%d-%d", r.start.Unix(), r.seq)
	doc, _ := protocol.NewTask(id, prompt).Encode()
	r.ledger.Add(&faults.Request{ID: id, What: "task on " + r.name(worker), Expect: faults.AnyAnswer, Sent: time.Now()})
	r.rc.XAdd(ctx, &redis.XAddArgs{Stream: r.keys.Input(worker), Values: protocol.Values(doc)})
	return id
}

// awaitAnswers waits until every request of ids is answered (or bound),
// printing the count as it grows; it returns whether all were and how
// many complete.
func (r *run) awaitAnswers(ctx context.Context, ids []string, bound time.Duration) (bool, int) {
	shown := 0
	var complete int
	failed := map[string]bool{}
	all := r.waitFor(ctx, bound, func() bool {
		as, _ := r.ledger.Answers(ctx)
		n := 0
		complete = 0
		for _, id := range ids {
			if len(as[id]) > 0 {
				n++
				if as[id][0].OK {
					complete++
				} else if !failed[id] {
					failed[id] = true
					r.say("%s (%s) answered %s", id, r.ledger.Get(id).What, as[id][0].Desc)
				}
			}
		}
		if len(ids) > 1 && n >= shown+10 || (n == len(ids) && n > shown && len(ids) > 1) {
			r.say("answered %d/%d", n, len(ids))
			shown = n
		}
		return n == len(ids)
	})
	return all, complete
}

func (r *run) answered(ctx context.Context, ids []string) int {
	as, _ := r.ledger.Answers(ctx)
	n := 0
	for _, id := range ids {
		if len(as[id]) > 0 {
			n++
		}
	}
	return n
}

// follow prints the lifecycle events that tell the fleet's story (new
// workers and where, lost hosts, failed tasks) until the returned stop.
func (r *run) follow(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	last := "$"
	if res, err := r.rc.XRevRangeN(ctx, r.keys.Lifecycle(), "+", "-", 1).Result(); err == nil && len(res) > 0 {
		last = res[0].ID
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			res, err := r.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{r.keys.Lifecycle(), last}, Block: time.Second}).Result()
			if err != nil {
				continue
			}
			for _, m := range res[0].Messages {
				last = m.ID
				data, _ := protocol.EntryData(m.Values)
				ev, err := protocol.DecodeLifecycle(data)
				if err != nil {
					continue
				}
				switch ev.Event {
				case protocol.EventHostLost:
					r.say("%s: host_lost (spawner, on a surviving host): its host %v stopped renewing", r.name(ev.WorkerID), ev.Detail["host"])
				case protocol.EventCreated:
					go r.replacement(ctx, ev)
				case protocol.EventReplaceFailed:
					r.say("%s: replace_failed %v", r.name(ev.WorkerID), ev.Detail)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// replacement names a new worker that replaces another (its status hash
// says so a moment after its created event).
func (r *run) replacement(ctx context.Context, ev protocol.Lifecycle) {
	var old string
	r.waitFor(ctx, 3*time.Second, func() bool {
		old = r.rc.HGet(ctx, r.keys.Status(ev.WorkerID), protocol.StatusFieldReplaces).Val()
		return old != ""
	})
	if old == "" {
		return
	}
	r.mu.Lock()
	name := fmt.Sprintf("w%d@%s", len(r.names)+1, ev.Host)
	r.names[ev.WorkerID] = name
	r.mu.Unlock()
	r.say("%s created on %s, replacing %s: the tasks waiting for %s moved to it", name, ev.Host, r.name(old), r.name(old))
}

func (r *run) lifecycle(ctx context.Context, since time.Time) []protocol.Lifecycle {
	msgs, err := r.rc.XRange(ctx, r.keys.Lifecycle(), fmt.Sprint(since.UnixMilli()), "+").Result()
	if err != nil {
		return nil
	}
	var out []protocol.Lifecycle
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if ev, err := protocol.DecodeLifecycle(data); err == nil {
			var ms int64
			fmt.Sscanf(m.ID, "%d-", &ms)
			ev.Timestamp = time.UnixMilli(ms)
			out = append(out, ev)
		}
	}
	return out
}

func (r *run) waitEvent(ctx context.Context, since time.Time, worker string, ev protocol.Event, bound time.Duration) error {
	if r.waitFor(ctx, bound, func() bool {
		for _, l := range r.lifecycle(ctx, since) {
			if l.WorkerID == worker && l.Event == ev {
				return true
			}
		}
		return false
	}) {
		return nil
	}
	return fmt.Errorf("no %s event of %s within %s", ev, r.name(worker), bound)
}

func (r *run) hostOf(ctx context.Context, worker string) string {
	return r.rc.HGet(ctx, r.keys.Status(worker), protocol.StatusFieldHost).Val()
}

// waitHosts waits until n hosts are live in the registry.
func (r *run) waitHosts(ctx context.Context, n int, bound time.Duration) error {
	if r.waitFor(ctx, bound, func() bool {
		live, _ := r.rc.ZCount(ctx, r.keys.Hosts(), fmt.Sprint(time.Now().UnixMilli()), "+inf").Result()
		return int(live) >= n
	}) {
		return nil
	}
	return fmt.Errorf("fewer than %d hosts live in %s after %s", n, r.keys.Hosts(), bound)
}

// freeSlots says each host's free slots: its max_workers less the
// workers placed on it.
func (r *run) freeSlots(ctx context.Context) string {
	placed, _ := r.rc.HGetAll(ctx, r.keys.Placement()).Result()
	used := map[string]int{}
	for _, h := range placed {
		used[h]++
	}
	var parts []string
	for _, h := range r.fleet.Hosts {
		parts = append(parts, fmt.Sprintf("%s %d", h.ID, r.perHost-used[h.ID]))
	}
	return strings.Join(parts, ", ")
}

// engineContainers lists the fleet's containers on a host's engine.
func (r *run) engineContainers(h *faults.Host) []string {
	out, err := h.Engine.Docker("ps", "-a", "--filter", "label="+protocol.LabelKeyPrefix+"="+r.keys.Prefix,
		"--format", `{{.Label "`+protocol.LabelWorkerID+`"}} {{.State}}`)
	if err != nil {
		return nil
	}
	var cs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			cs = append(cs, r.name(f[0])+" "+f[1])
		}
	}
	return cs
}

// stopManagers stops every running manager as a supervisor does (SIGTERM:
// each removes its workers).
func (r *run) stopManagers() {
	var wg sync.WaitGroup
	for _, h := range r.fleet.Hosts {
		if m := h.Manager(); m != nil && m.Running() {
			wg.Add(1)
			go func() { defer wg.Done(); m.Terminate(faults.StopTimeout + 10*time.Second) }()
		}
	}
	wg.Wait()
}

// waitFor polls f every 100 ms until it holds, bound passes or ctx ends,
// and reports whether it held.
func (r *run) waitFor(ctx context.Context, bound time.Duration, f func() bool) bool {
	held := false
	testkit.Poll(bound, 100*time.Millisecond, func() bool { held = f(); return held || ctx.Err() != nil })
	return held
}

func since(t time.Time) string { return round(time.Since(t)) }

func round(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.0f s", d.Seconds())
	}
	if d >= time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
