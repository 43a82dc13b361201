package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/protocol/testkit"
)

// Options describe a case.
type Options struct {
	Name      string // its row in FAULTS.md
	Fault     string // what is injected, for FAULTS.md
	Recovered string // what "recovered" means in this case, and its bound
	// MaxWorkers is MAX_CONCURRENT_WORKERS (10 when 0).
	MaxWorkers int
	// Heartbeat is HEARTBEAT_INTERVAL (1 s when 0): short, so that a case
	// judges liveness in seconds.
	Heartbeat time.Duration
	// Env is more environment for every manager of the case; it overrides
	// the case's defaults.
	Env map[string]string
}

// StopTimeout is WORKER_STOP_TIMEOUT for every case: the least the
// manager takes (the wrapper's shutdown grace is 10 s shorter).
const StopTimeout = 12 * time.Second

// CreationGrace is CREATION_GRACE for every case.
const CreationGrace = 5 * time.Second

// Lease returns the lease the suite gives its managers as LEASE_TTL (the
// suite's own LEASE_TTL, 3 s by default). Issue 11 asks for create leases,
// a leader lease and the claiming of a dead consumer's commands, each
// within one lease (default 15 s); the manager of today has no such knob
// and ignores the variable, and the cases' bounds count in these leases.
func Lease() time.Duration {
	if v := os.Getenv("LEASE_TTL"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return 3 * time.Second
}

// Long reports whether the long cases run too (FAULTS_LONG=1, which `make
// faults` sets).
func Long() bool { v := os.Getenv("FAULTS_LONG"); return v == "1" || v == "true" }

// Case is one fault case: its own Redis (append-only file fsynced on every
// write, so that a SIGKILLed Redis restarted on its port keeps its data),
// its own key prefix (so its containers carry a label no other case's do),
// its managers, and the ledger of what it sent. When the test ends, even
// on failure, it stops its managers (SIGTERM, as a supervisor would: the
// final shutdown), counts the containers left, removes them, and records
// the case's row.
type Case struct {
	T      *testing.T
	Opt    Options
	Prefix string
	Keys   protocol.Keys
	Redis  *testkit.Redis
	RC     *redis.Client
	L      *Ledger
	Lease  time.Duration

	replies string
	begun   time.Time

	mu        sync.Mutex
	managers  []*Manager
	seq       int
	recovery  string
	recovered *bool
	unwanted  int
	notes     []string
	settled   map[string][]Answer // the answers when the checks ended
	stops     []func()            // run before the final shutdown
	afters    []func()            // run after it (what the managers need until they stop)
}

var slugRe = regexp.MustCompile(`[^a-z0-9]+`)

// NewCase sets a case up; the test fails at once when Docker or Redis is
// missing (nothing is skipped).
func NewCase(t *testing.T, opt Options) *Case {
	t.Helper()
	testkit.RequireDocker(t)
	ensureBuilt(t)
	if opt.MaxWorkers == 0 {
		opt.MaxWorkers = 10
	}
	if opt.Heartbeat == 0 {
		opt.Heartbeat = time.Second
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	slug := slugRe.ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-")
	if len(slug) > 30 {
		slug = slug[:30]
	}
	prefix := "faults-" + strings.Trim(slug, "-") + "-" + hex.EncodeToString(b)
	keys, err := protocol.NewKeys(prefix)
	if err != nil {
		t.Fatal(err)
	}
	r := testkit.StartRedisWith(t, testkit.RedisOptions{Persist: true})
	rc := redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	c := &Case{T: t, Opt: opt, Prefix: prefix, Keys: keys, Redis: r, RC: rc, Lease: Lease(),
		replies: keys.Replies("faults"), begun: time.Now()}
	c.L = newLedger(rc, keys, c.replies)
	// Registered after Redis's own cleanup, so it runs first.
	t.Cleanup(c.finish)
	t.Logf("case %q: key prefix %s, redis %s", opt.Name, prefix, r.Addr)
	return c
}

// ManagerEnv is the environment of a manager of the case: short
// intervals, so that a case takes seconds.
func (c *Case) ManagerEnv(id string) map[string]string {
	env := map[string]string{
		"REDIS_URL":               c.Redis.URL(),
		"WORKER_KEY_PREFIX":       c.Prefix,
		"MANAGER_ID":              id,
		"MAX_CONCURRENT_WORKERS":  strconv.Itoa(c.Opt.MaxWorkers),
		"HEARTBEAT_INTERVAL":      c.Opt.Heartbeat.String(),
		"RECONCILE_INTERVAL":      "2s",
		"CREATION_GRACE":          CreationGrace.String(),
		"WORKER_STOP_TIMEOUT":     StopTimeout.String(),
		"WORKER_CREATION_TIMEOUT": "60s",
		"WORKER_PROJECT_VOLUMES":  "false",
		"WORKER_BASE_IMAGE":       BaseImage,
		"WORKER_MEMORY_LIMIT":     "256m",
		"LEASE_TTL":               c.Lease.String(),
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		env["DOCKER_HOST"] = h
	}
	for k, v := range c.Opt.Env {
		env[k] = v
	}
	return env
}

// StartManager starts a worker-manager with MANAGER_ID id and the case's
// environment, changed by extra; it waits until the manager reads the
// command stream.
func (c *Case) StartManager(id string, extra map[string]string) *Manager {
	c.T.Helper()
	env := c.ManagerEnv(id)
	for k, v := range extra {
		env[k] = v
	}
	m, err := startManager(c.T.TempDir(), id, env)
	if err != nil {
		c.T.Fatal(err)
	}
	c.mu.Lock()
	c.managers = append(c.managers, m)
	c.mu.Unlock()
	// Ready: it reads the command stream under its MANAGER_ID (the
	// consumer name the README documents).
	if !c.waitFor(15*time.Second, func() bool { return !m.Running() || c.consumerSeen(id) }) || !m.Running() {
		c.T.Fatalf("manager %s did not start reading commands (no consumer %q in group %s) within 15 s; its log:\n%s",
			id, id, protocol.ManagerGroup, m.LogTail(30))
	}
	return m
}

// consumerSeen reports whether id is a consumer of the managers group on
// the command stream: it has read commands at least once.
func (c *Case) consumerSeen(id string) bool {
	cs, err := c.RC.XInfoConsumers(context.Background(), c.Keys.Commands(), protocol.ManagerGroup).Result()
	if err != nil {
		return false
	}
	for _, x := range cs {
		if x.Name == id {
			return true
		}
	}
	return false
}

// PendingAt returns how many commands consumer id holds delivered and not
// acknowledged.
func (c *Case) PendingAt(id string) int64 {
	cs, err := c.RC.XInfoConsumers(context.Background(), c.Keys.Commands(), protocol.ManagerGroup).Result()
	if err != nil {
		return 0
	}
	for _, x := range cs {
		if x.Name == id {
			return x.Pending
		}
	}
	return 0
}

// waitFor polls f every 50 ms until it holds or bound passes.
func (c *Case) waitFor(bound time.Duration, f func() bool) bool {
	deadline := time.Now().Add(bound)
	for {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Case) next(kind string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return fmt.Sprintf("%s-%d", kind, c.seq)
}

// Spec is the spec of a worker whose agent is the fake one.
func (c *Case) Spec(kind protocol.Kind) protocol.WorkerSpec {
	return protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: kind,
		Env: map[string]string{"AGENT_BIN": FakeAgent, "SESSION_POLICY": "new"}}
}

// Send adds a command to the command stream (its id, reply stream and
// time filled in) and records it; it returns the command id.
func (c *Case) Send(cmd protocol.Command, expect Expect, what string) string {
	c.T.Helper()
	cmd.ID = c.next("cmd-" + string(cmd.Action))
	cmd.ReplyTo, cmd.Timestamp = c.replies, time.Now().UTC()
	doc, err := cmd.Encode()
	if err != nil {
		c.T.Fatal(err)
	}
	c.L.add(&Request{ID: cmd.ID, Command: true, What: what, Expect: expect, Sent: time.Now()})
	if err := c.RC.XAdd(context.Background(), &redis.XAddArgs{Stream: c.Keys.Commands(), Values: protocol.Values(doc)}).Err(); err != nil {
		c.T.Fatalf("send %s: %v", cmd.ID, err)
	}
	return cmd.ID
}

// SendCreate sends a create command for a worker of kind.
func (c *Case) SendCreate(kind protocol.Kind, expect Expect) string {
	spec := c.Spec(kind)
	return c.Send(protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, expect, "create")
}

// Create creates a worker as set-up (not as the fault's subject): the test
// fails when it is not served within bound.
func (c *Case) Create(kind protocol.Kind, bound time.Duration) string {
	c.T.Helper()
	return c.CreateMany(1, kind, bound)[0]
}

// CreateMany sends n creates at once and returns the workers' ids.
func (c *Case) CreateMany(n int, kind protocol.Kind, bound time.Duration) []string {
	c.T.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, c.SendCreate(kind, ReplyOK))
	}
	if _, ok := c.WaitAnswered(ids, bound); !ok {
		c.T.Fatalf("set-up: %d creates not all answered within %s", n, bound)
	}
	var workers []string
	for _, id := range ids {
		a := c.First(id)
		if !a.OK || a.Worker == "" {
			c.T.Fatalf("set-up: create %s answered %s", id, a.Desc)
		}
		workers = append(workers, a.Worker)
	}
	return workers
}

// Task adds a task to a long-lived worker's input (to the developer queue
// when worker is "") and records it; it returns the request id. The fake
// agent reads its prompt: "fake:sleep-3000" runs 3 s.
func (c *Case) Task(worker, prompt string, expect Expect) string {
	c.T.Helper()
	return c.TaskAs(c.next("task"), worker, prompt, expect, "")
}

// TaskAs is Task with the request id given, and what the task is for the
// notes ("" says where it went).
func (c *Case) TaskAs(req, worker, prompt string, expect Expect, what string) string {
	c.T.Helper()
	stream, where := c.Keys.DeveloperInput(), "task on the developer queue"
	if worker != "" {
		stream, where = c.Keys.Input(worker), "task on "+short(worker)
	}
	if what == "" {
		what = where
	}
	doc, err := protocol.NewTask(req, prompt).Encode()
	if err != nil {
		c.T.Fatal(err)
	}
	c.L.add(&Request{ID: req, What: what, Expect: expect, Sent: time.Now()})
	if err := c.RC.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
		c.T.Fatalf("send %s: %v", req, err)
	}
	return req
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// answers reads the case's answers; while Redis is down it returns nil.
func (c *Case) answers() map[string][]Answer {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := c.L.Answers(ctx)
	if err != nil {
		return nil
	}
	return a
}

// First returns the first answer to a request (zero when none).
func (c *Case) First(id string) Answer {
	if as := c.answers()[id]; len(as) > 0 {
		return as[0]
	}
	return Answer{}
}

// WaitAnswered waits until every request of ids has an answer, or bound
// passes; the bound becomes their deadline (a later answer is late). It
// returns when the last first answer came, and whether every request was
// answered in time with what it expects (a task of a healthy worker
// answered failed is answered, and not served).
func (c *Case) WaitAnswered(ids []string, bound time.Duration) (time.Time, bool) {
	c.L.SetDeadline(ids, time.Now().Add(bound))
	var last time.Time
	served := true
	answered := c.waitFor(bound, func() bool {
		as := c.answers()
		if as == nil {
			return false
		}
		last, served = time.Time{}, true
		for _, id := range ids {
			if len(as[id]) == 0 {
				return false
			}
			a := as[id][0]
			if a.At.After(last) {
				last = a.At
			}
			if r := c.L.Get(id); r != nil && !r.Expect.Met(a) {
				served = false
			}
		}
		return true
	})
	return last, answered && served
}

// WaitEvent waits for a lifecycle event of worker (any worker when "")
// about request req (any when "") and returns when Redis stored it.
func (c *Case) WaitEvent(worker string, ev protocol.Event, req string, bound time.Duration) (time.Time, bool) {
	return c.WaitEventSince(time.Time{}, worker, ev, req, bound)
}

// WaitEventSince is WaitEvent for an event stored at or after since.
func (c *Case) WaitEventSince(since time.Time, worker string, ev protocol.Event, req string, bound time.Duration) (time.Time, bool) {
	l, ok := c.Event(since, worker, ev, req, bound)
	return l.Timestamp, ok
}

// Event waits for a lifecycle event as WaitEventSince does and returns
// it, its Timestamp set to when Redis stored it.
func (c *Case) Event(since time.Time, worker string, ev protocol.Event, req string, bound time.Duration) (protocol.Lifecycle, bool) {
	var found protocol.Lifecycle
	ok := c.waitFor(bound, func() bool {
		msgs, err := c.RC.XRange(context.Background(), c.Keys.Lifecycle(), "-", "+").Result()
		if err != nil {
			return false
		}
		for _, m := range msgs {
			data, _ := protocol.EntryData(m.Values)
			var l protocol.Lifecycle
			if json.Unmarshal(data, &l) != nil {
				continue
			}
			at := entryTime(m.ID)
			if l.Event == ev && (worker == "" || l.WorkerID == worker) && (req == "" || l.RequestID == req) && !at.Before(since.Truncate(time.Millisecond)) {
				found, found.Timestamp = l, at
				return true
			}
		}
		return false
	})
	return found, ok
}

// Container is a labelled container of the case.
type Container struct {
	ID, State, WorkerID string
}

// Containers lists the containers labelled with the case's key prefix,
// whatever their state.
func (c *Case) Containers() []Container {
	out, err := exec.Command("docker", "ps", "-a", "--no-trunc", "--filter", "label="+protocol.LabelKeyPrefix+"="+c.Prefix,
		"--format", `{{.ID}}	{{.State}}	{{.Label "`+protocol.LabelWorkerID+`"}}`).Output()
	if err != nil {
		c.T.Errorf("docker ps: %v", err)
		return nil
	}
	var cs []Container
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 3 {
			cs = append(cs, Container{ID: f[0], State: f[1], WorkerID: f[2]})
		}
	}
	return cs
}

// ContainerOf returns the container of a worker ("" when none).
func (c *Case) ContainerOf(worker string) string {
	for _, x := range c.Containers() {
		if x.WorkerID == worker {
			return x.ID
		}
	}
	return ""
}

// Docker runs a docker command and fails the test when it fails.
func (c *Case) Docker(args ...string) string {
	c.T.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		c.T.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Unwanted counts workers that should not exist (an unrequested
// replacement, a second container for one create) as orphans.
func (c *Case) Unwanted(n int, why string) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unwanted += n
	c.notes = append(c.notes, fmt.Sprintf("%d unwanted: %s", n, why))
}

// Note adds a line to the case's row.
func (c *Case) Note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
	c.T.Logf(format, args...)
}

// Recovered records the time the case took to recover from its fault.
func (c *Case) Recovered(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := true
	c.recovery, c.recovered = roundDur(d), &ok
	c.T.Logf("recovered in %s", c.recovery)
}

// NotRecovered records that the case did not recover within its bound.
func (c *Case) NotRecovered(bound time.Duration, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := false
	c.recovery, c.recovered = "not within "+roundDur(bound), &ok
	c.notes = append(c.notes, why)
	c.T.Logf("not recovered within %s: %s", roundDur(bound), why)
}

// Settle marks the end of the case's checks: answers that come after
// (with the final shutdown) do not save a request.
func (c *Case) Settle() {
	a := c.answers()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled == nil {
		c.settled = a
	}
}

// OnFinish runs f when the case ends, before the final shutdown.
func (c *Case) OnFinish(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stops = append(c.stops, f)
}

// AfterFinish runs f when the case ends, after the final shutdown and the
// count of what was left.
func (c *Case) AfterFinish(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.afters = append(c.afters, f)
}

// finish is the case's end: the final shutdown of its managers, orphans
// counted and removed, the row recorded, and the verdict.
func (c *Case) finish() {
	t := c.T
	c.mu.Lock()
	stops, afters := c.stops, c.afters
	c.mu.Unlock()
	defer func() {
		for i := len(afters) - 1; i >= 0; i-- {
			afters[i]()
		}
	}()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	if !c.Redis.Running() {
		if err := c.Redis.Start(); err != nil {
			t.Errorf("restart redis for the final count: %v", err)
		}
	}
	c.Settle()
	c.mu.Lock()
	managers := append([]*Manager(nil), c.managers...)
	c.mu.Unlock()
	// The final shutdown: what a supervisor does, SIGTERM, then SIGKILL
	// past the stop timeout and a margin (a wrapper's shutdown grace is 10 s
	// shorter than the stop timeout, so every worker is gone by then).
	bound := StopTimeout + 5*time.Second
	for _, m := range managers {
		if !m.Running() {
			continue
		}
		if exited, took := m.Terminate(bound); !exited {
			c.Note("final shutdown: manager %s did not exit within %s of SIGTERM (SIGKILLed)", m.ID, roundDur(took))
		}
	}
	left := c.Containers()
	if len(left) > 0 {
		var states []string
		for _, x := range left {
			states = append(states, short(x.WorkerID)+" "+x.State)
			_ = exec.Command("docker", "rm", "-f", x.ID).Run()
		}
		c.Note("%d containers left after the final shutdown (%s)", len(left), strings.Join(states, ", "))
	}
	tally := c.L.Tally(c.settled, c.answers())
	c.mu.Lock()
	row := Row{Case: c.Opt.Name, Fault: c.Opt.Fault, RecoveredMeans: c.Opt.Recovered, Tasks: tally.Sent,
		Lost: tally.Lost, Duplicated: tally.Duplicated, Orphans: len(left) + c.unwanted, Recovery: c.recovery,
		Took: time.Since(c.begun)}
	notRecovered := c.recovered != nil && !*c.recovered
	if row.Recovery == "" {
		row.Recovery = "—"
	}
	notes := tally.Notes
	if len(notes) > 6 {
		notes = append(notes[:6:6], fmt.Sprintf("and %d more such", len(notes)-6))
	}
	notes = append(notes, c.notes...)
	c.mu.Unlock()
	var failures []string
	if row.Lost > 0 {
		failures = append(failures, fmt.Sprintf("%d lost", row.Lost))
	}
	if row.Duplicated > 0 {
		failures = append(failures, fmt.Sprintf("%d duplicated", row.Duplicated))
	}
	if row.Orphans > 0 {
		failures = append(failures, fmt.Sprintf("%d orphans", row.Orphans))
	}
	if notRecovered {
		failures = append(failures, "not recovered within its bound")
	}
	if t.Failed() && len(failures) == 0 {
		notes = append(notes, "the case itself failed (see the test log)")
	}
	row.Pass = len(failures) == 0 && !t.Failed()
	row.Notes = strings.Join(notes, "; ")
	record(row)
	for _, n := range tally.Notes {
		t.Log(n)
	}
	if len(failures) > 0 {
		t.Errorf("%s: %s of %d requests (goal 0 lost, 0 duplicated, 0 orphans, recovery within the bound)",
			c.Opt.Name, strings.Join(failures, ", "), row.Tasks)
	}
	if !row.Pass || os.Getenv("FAULTS_DEBUG") != "" {
		for _, m := range managers {
			t.Logf("manager %s (pid %d), last lines of its log:\n%s", m.ID, m.Pid(), m.LogTail(20))
		}
	}
	c.RC.Close()
}

// ErrNoAnswer is returned by WaitOne when no answer came within the bound.
var ErrNoAnswer = errors.New("faults: no answer within the bound")

// WaitOne waits for the answer to one request (whatever it says).
func (c *Case) WaitOne(id string, bound time.Duration) (Answer, error) {
	c.WaitAnswered([]string{id}, bound)
	if as := c.answers()[id]; len(as) > 0 {
		return as[0], nil
	}
	return Answer{}, ErrNoAnswer
}
