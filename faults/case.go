package faults

import (
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
	// DiskDir holds the disks of the case's workers (WORKER_DISK_DIR of
	// every manager of the case): unmounted at its end, whatever killed
	// the managers.
	DiskDir string

	outcome // what the case records for its row: c.Note, c.Recovered, ...
	hooks   // what runs when it ends: c.OnFinish, c.BeforeCount, c.AfterFinish

	replies string
	begun   time.Time

	mu       sync.Mutex
	managers []*Manager
	seq      int
	fleet    *Fleet   // the case's simulated hosts, if any
	gateway  *Gateway // the case's worker-gateway, once a sealed manager started
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
		outcome: outcome{logf: t.Logf}, replies: keys.Replies("faults"), begun: time.Now()}
	if sentinel != nil {
		c.Wait = protocol.WaitPolicy{Replicas: 1, Timeout: protocol.DefaultRedisWaitTimeout}
	}
	c.L = NewLedger(c.RC, keys, c.replies)
	c.DiskDir = testkit.TempDiskDir(t) // unmounted after c.finish removed the containers
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

// Settle marks the end of the case's checks: answers that come after
// (with the final shutdown) do not save a request.
func (c *Case) Settle() { c.settle(c.answers()) }
