package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/testkit"
)

// Options describe a case.
type Options struct {
	Name      string // its row in FAULTS.md
	Fault     string // what is injected, for FAULTS.md
	Recovered string // what "recovered" means in this case, and its bound
	// Detected says what the case's detection time measures (none when
	// the case sees no single moment the runtime noticed the fault).
	Detected string
	// MaxWorkers is MAX_CONCURRENT_WORKERS (10 when 0).
	MaxWorkers int
	// Heartbeat is HEARTBEAT_INTERVAL (1 s when 0): short, so that a case
	// judges liveness in seconds.
	Heartbeat time.Duration
	// Env is more environment for every manager of the case; it overrides
	// the case's defaults.
	Env map[string]string
	// Sentinel: the case's Redis is a Sentinel deployment (a primary with
	// a password, a replica, three sentinels: testkit.StartSentinel), which
	// every component reaches through its redis+sentinel:// URL.
	Sentinel bool
	// ExtraAnswers is how many answers beyond the first a request may get
	// within the case's bound (PROTOCOL.md's bound across a failover); they
	// are counted as duplicated all the same.
	ExtraAnswers int
}

// StopTimeout is WORKER_STOP_TIMEOUT for every case: the least the
// manager takes (the wrapper's shutdown grace is 10 s shorter).
const StopTimeout = 12 * time.Second

// CreationGrace is CREATION_GRACE for every case.
const CreationGrace = 5 * time.Second

// Lease returns the lease the suite gives its managers as LEASE_TTL (the
// suite's own LEASE_TTL, 3 s by default, instead of the managers' 15 s):
// a queued or admitted create, a retirement, the leader's lease and the
// idle time after which a dead manager's commands are claimed each cost
// at most one lease after a crash, and the cases' bounds count
// in leases.
func Lease() time.Duration {
	v := os.Getenv("LEASE_TTL")
	if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 { // seconds, as the manager reads it too
		return time.Duration(n * float64(time.Second))
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
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
	Redis  *testkit.Redis // the first primary with Options.Sentinel
	RC     *redis.Client
	// Sentinel is the deployment with Options.Sentinel; Wait is the WAIT
	// policy of the case's own XADDs (one replica then).
	Sentinel *testkit.Sentinel
	Wait     protocol.WaitPolicy
	L        *Ledger
	Lease    time.Duration

	replies string
	begun   time.Time

	mu        sync.Mutex
	managers  []*Manager
	seq       int
	recovery  string
	recovered *bool
	detection string
	unwanted  int
	notes     []string
	settled   map[string][]Answer // the answers when the checks ended
	fleet     *Fleet              // the case's simulated hosts, if any
	gateway   *Gateway            // the case's worker-gateway, once a sealed manager started
	stops     []func()            // run before the final shutdown
	counts    []func()            // run after it, before the containers left are counted
	afters    []func()            // run at the very end (what the managers need until they stop)
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
	var r *testkit.Redis
	var sentinel *testkit.Sentinel
	ro := &redis.UniversalOptions{DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1}
	if opt.Sentinel {
		sentinel = testkit.StartSentinel(t, testkit.SentinelOptions{Password: "faults-" + hex.EncodeToString(b), SentinelPassword: "sentinels"})
		r = sentinel.Servers[0]
		o, err := redisconn.Options(sentinel.URL())
		if err != nil {
			t.Fatal(err)
		}
		// Its reads retry on their own across a failover.
		o.DialTimeout, o.ReadTimeout, o.MaxRetries = ro.DialTimeout, ro.ReadTimeout, 3
		ro = o
	} else {
		r = testkit.StartRedisWith(t, testkit.RedisOptions{Persist: true})
		ro.Addrs = []string{r.Addr}
	}
	c := &Case{T: t, Opt: opt, Prefix: prefix, Keys: keys, Redis: r, RC: redisconn.NewClient(ro), Sentinel: sentinel, Lease: Lease(),
		replies: keys.Replies("faults"), begun: time.Now()}
	if sentinel != nil {
		c.Wait = protocol.WaitPolicy{Replicas: 1, Timeout: protocol.DefaultRedisWaitTimeout}
	}
	c.L = NewLedger(c.RC, keys, c.replies)
	// Registered after Redis's own cleanup, so it runs first.
	t.Cleanup(c.finish)
	t.Logf("case %q: key prefix %s, redis %s", opt.Name, prefix, protocol.RedactRedisURL(c.URL()))
	return c
}

// URL is the Redis URL of every component of the case.
func (c *Case) URL() string {
	if c.Sentinel != nil {
		return c.Sentinel.URL()
	}
	return c.Redis.URL()
}

// ManagerEnv is the environment of a manager of the case: short
// intervals, so that a case takes seconds.
func (c *Case) ManagerEnv(id string) map[string]string {
	env := map[string]string{
		"REDIS_URL":               c.URL(),
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
		"WORKER_ENV":              `{"AGENT_BIN":"` + FakeAgent + `","SESSION_POLICY":"new"}`,
		"WORKER_NETWORK_MODE":     "sealed", // GATEWAY_DIR: the case's or the host's gateway (StartManager)
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
// command stream. Its workers sealed (the case's default), it gets the
// case's gateway as GATEWAY_DIR, started first when none runs yet
// (relaying to the case's Redis; with Options.Sentinel, to the primary
// its sentinels name): every manager of the case is on one host, so they
// share it.
func (c *Case) StartManager(id string, extra map[string]string) *Manager {
	c.T.Helper()
	return c.launch(id, extra, func(dir string, env map[string]string) (*Manager, error) {
		if env["WORKER_NETWORK_MODE"] == "sealed" {
			g := c.Gateway()
			if g == nil {
				upstream, err := upstreamOf(c.URL())
				if err != nil {
					return nil, err
				}
				g = c.StartGateway(upstream)
			}
			env["GATEWAY_DIR"] = g.Dir
		}
		return startManager(dir, id, env)
	})
}

// Gateway returns the case's worker-gateway (nil before one started).
func (c *Case) Gateway() *Gateway {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gateway
}

// StartGateway starts the case's worker-gateway on a new short directory,
// relaying the workers' redis.sock to upstream (GATEWAY_REDIS): a case whose
// workers reach Redis another way (a proxy) calls it before its first
// manager. It is stopped (SIGTERM) when the case has ended, after the
// final shutdown of the managers (their workers need Redis until they
// stop), and its directory removed.
func (c *Case) StartGateway(upstream string) *Gateway {
	c.T.Helper()
	if c.Gateway() != nil {
		c.T.Fatal("faults: the case's gateway was started already")
	}
	dir, err := gatewayDir()
	if err != nil {
		c.T.Fatal(err)
	}
	g, err := startGateway(dir, c.T.TempDir(), upstream)
	if err != nil {
		os.RemoveAll(dir)
		c.T.Fatal(err)
	}
	c.mu.Lock()
	c.gateway = g
	c.mu.Unlock()
	c.AfterFinish(func() {
		if g := c.Gateway(); g.Running() {
			if exited, took := g.terminate(10 * time.Second); !exited {
				c.T.Errorf("worker-gateway did not exit within %s of SIGTERM; its log:\n%s", roundDur(took), g.LogTail(20))
			}
		}
		_ = os.RemoveAll(dir)
	})
	shown := upstream // host:port, or a sentinel URL with the sentinels' password
	if strings.Contains(upstream, "://") {
		shown = protocol.RedactRedisURL(upstream)
	}
	c.T.Logf("worker-gateway (pid %d) on %s, relaying to %s", g.Pid(), dir, shown)
	return g
}

// RestartGateway starts the case's gateway again on its directory, as a
// supervisor restarts a crashed one (its process must have exited).
func (c *Case) RestartGateway() *Gateway {
	c.T.Helper()
	g, err := c.restartGateway()
	if err != nil {
		c.T.Fatal(err)
	}
	return g
}

func (c *Case) restartGateway() (*Gateway, error) {
	g, err := c.Gateway().Restart()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.gateway = g
	c.mu.Unlock()
	return g, nil
}

// launch starts a manager with the case's environment changed by extra,
// through start, and waits until it reads the command stream.
func (c *Case) launch(id string, extra map[string]string, start func(dir string, env map[string]string) (*Manager, error)) *Manager {
	c.T.Helper()
	env := c.ManagerEnv(id)
	for k, v := range extra {
		env[k] = v
	}
	launched := time.Now()
	m, err := start(c.T.TempDir(), env)
	if err != nil {
		c.T.Fatal(err)
	}
	c.mu.Lock()
	c.managers = append(c.managers, m)
	c.mu.Unlock()
	// Ready: it reads the command stream under its MANAGER_ID (the
	// consumer name the README documents), since it was launched (a
	// manager started again under its id finds its consumer there).
	if !c.waitFor(15*time.Second, func() bool { return !m.Running() || c.consumerSeen(id, launched) }) || !m.Running() {
		c.T.Fatalf("manager %s did not start reading commands (no consumer %q in group %s) within 15 s; its log:\n%s",
			id, id, protocol.ManagerGroup, m.LogTail(30))
	}
	return m
}

// consumerSeen reports whether id is a consumer of the managers group on
// the command stream that has read commands since since.
func (c *Case) consumerSeen(id string, since time.Time) bool {
	cs, err := c.RC.XInfoConsumers(context.Background(), c.Keys.Commands(), protocol.ManagerGroup).Result()
	if err != nil {
		return false
	}
	for _, x := range cs {
		if x.Name == id && x.Idle < time.Since(since) {
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
	return testkit.Poll(bound, 50*time.Millisecond, f)
}

func (c *Case) next(kind string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return fmt.Sprintf("%s-%d", kind, c.seq)
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
	c.recovery, c.recovered = roundDur(max(0, d)), &ok
	c.T.Logf("recovered in %s", c.recovery)
}

// Detection records the time from the fault to the runtime's first
// answer to it (Options.Detected says which).
func (c *Case) Detection(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detection = roundDur(max(0, d)) // Redis's clock counts in milliseconds
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

// BeforeCount runs f when the case ends, after the final shutdown and
// before the containers left are counted.
func (c *Case) BeforeCount(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = append(c.counts, f)
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
		// Cleanup only: a container the engine made after the count (a
		// call it finished for a manager long gone) is removed too.
		for _, x := range c.Containers() {
			t.Logf("removing container %s (%s), made after the count", short(x.ID), x.State)
			c.RemoveContainer(x)
		}
	}()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	if c.Sentinel == nil && !c.Redis.Running() {
		if err := c.Redis.Start(); err != nil {
			t.Errorf("restart redis for the final count: %v", err)
		}
	}
	if g := c.Gateway(); g != nil && !g.Running() {
		if _, err := c.restartGateway(); err != nil {
			t.Errorf("restart the gateway for the final shutdown: %v", err)
		}
	}
	c.Settle()
	managers := c.shutDown()
	left := c.orphans()
	tally := c.L.Tally(c.settled, c.answers())
	row, notes := c.row(tally, left)
	failures, notes := c.verdict(row, tally, notes)
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
			t.Logf("manager %s (pid %d), last lines of its log:\n%s", m.ID, m.Pid(), m.LogTail(logLines()))
		}
		if g := c.Gateway(); g != nil {
			t.Logf("worker-gateway (pid %d), last lines of its log:\n%s", g.Pid(), g.LogTail(logLines()))
		}
	}
	c.RC.Close()
}

// shutDown is the final shutdown of the case's managers, as a supervisor
// does it: SIGTERM, then SIGKILL past the stop timeout and a margin (a
// wrapper's shutdown grace is 10 s shorter than the stop timeout, so every
// worker is gone by then). It returns the managers.
func (c *Case) shutDown() []*Manager {
	c.mu.Lock()
	managers := append([]*Manager(nil), c.managers...)
	c.mu.Unlock()
	bound := StopTimeout + 5*time.Second
	for _, m := range managers {
		if !m.Running() {
			continue
		}
		if exited, took := m.Terminate(bound); !exited {
			c.Note("final shutdown: manager %s did not exit within %s of SIGTERM (SIGKILLed)", m.ID, roundDur(took))
		}
	}
	return managers
}

// orphans runs the case's own counts, then removes and returns the
// containers left after the final shutdown.
func (c *Case) orphans() []Container {
	c.mu.Lock()
	counts := c.counts
	c.mu.Unlock()
	for _, f := range counts {
		f()
	}
	left := c.Containers()
	if len(left) > 0 {
		var states []string
		for _, x := range left {
			states = append(states, short(x.WorkerID)+" "+x.State+hostNote(x.Host))
			c.RemoveContainer(x)
		}
		c.Note("%d containers left after the final shutdown (%s)", len(left), strings.Join(states, ", "))
	}
	return left
}

// row is the case's line of FAULTS.md, without its verdict, and the notes
// so far.
func (c *Case) row(tally Tally, left []Container) (Row, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	row := Row{Case: c.Opt.Name, Fault: c.Opt.Fault, RecoveredMeans: c.Opt.Recovered, DetectedMeans: c.Opt.Detected, Tasks: tally.Sent,
		Lost: tally.Lost, Duplicated: tally.Duplicated, Orphans: len(left) + c.unwanted, Recovery: c.recovery,
		Took: time.Since(c.begun), Detection: c.detection}
	if row.Recovery == "" {
		row.Recovery = "—"
	}
	if row.Detection == "" {
		row.Detection = "—"
	}
	notes := tally.Notes
	if len(notes) > 6 {
		notes = append(notes[:6:6], fmt.Sprintf("and %d more such", len(notes)-6))
	}
	return row, append(notes, c.notes...)
}

// verdict lists what makes the case fail (lost, duplicated beyond its
// bound, orphans, not recovered) and adds to the notes what does not.
func (c *Case) verdict(row Row, tally Tally, notes []string) (failures, _ []string) {
	if row.Lost > 0 {
		failures = append(failures, fmt.Sprintf("%d lost", row.Lost))
	}
	switch {
	case row.Duplicated > 0 && tally.MaxAnswers > 1+c.Opt.ExtraAnswers:
		failures = append(failures, fmt.Sprintf("%d duplicated (one request answered %d times)", row.Duplicated, tally.MaxAnswers))
	case row.Duplicated > 0:
		notes = append(notes, fmt.Sprintf("%d duplicated, within the case's bound of %d answers per request", row.Duplicated, 1+c.Opt.ExtraAnswers))
	}
	if row.Orphans > 0 {
		failures = append(failures, fmt.Sprintf("%d orphans", row.Orphans))
	}
	c.mu.Lock()
	notRecovered := c.recovered != nil && !*c.recovered
	c.mu.Unlock()
	if notRecovered {
		failures = append(failures, "not recovered within its bound")
	}
	if c.T.Failed() && len(failures) == 0 {
		notes = append(notes, "the case itself failed (see the test log)")
	}
	return failures, notes
}

// logLines is how many last lines of each process's log a failed case
// prints: FAULTS_LOG_LINES, default 20.
func logLines() int {
	if n, err := strconv.Atoi(os.Getenv("FAULTS_LOG_LINES")); err == nil && n > 0 {
		return n
	}
	return 20
}
