package faults

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/protocol/testkit"
)

// BenchmarkFleetScaleCurve is issue 13's scale curve: a fleet of three
// simulated hosts (engines of their own, one worker-manager process each,
// default intervals), one Redis, grown to 10, 100 and 300 workers whose
// agent is the wrapper's fake one. At each size it reports, for the
// managers (the three processes, read from /proc): CPU in % of one core
// summed over the three, over a steady window with every worker idle;
// RSS, the largest of the three and their sum; for Redis (INFO): commands
// per second over the window and used memory; create → reply p95 and p99
// of creates sent one at a time (registration: the last min(20, N) creates
// of the size, after the others were made 12 at a time); and wake p99:
// a worker paused by a pause command, then a task XADDed to its input →
// its task_started event (min(20, N) workers, one at a time). The cost of
// an added worker is the slope of the managers' RSS and CPU from 10 to
// 300 workers.
func BenchmarkFleetScaleCurve(b *testing.B) {
	const (
		hosts   = 3
		maxHost = 100
		window  = 30 * time.Second // a steady window: 3 heartbeat intervals
		ramp    = 12               // creates in flight while growing
		probes  = 20
	)
	sizes := []int{10, 100, 300}
	if v := os.Getenv("FLEET_BENCH_SIZES"); v != "" { // e.g. "10,30" for a quick look
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 || n > hosts*maxHost {
				b.Fatalf("FLEET_BENCH_SIZES=%q: sizes are 1..%d", v, hosts*maxHost)
			}
			sizes = append(sizes, n)
		}
	}
	testkit.RequireDocker(b)
	ensureBuilt(b)
	rs := testkit.StartRedis(b)
	tag, err := EnsureWorkerImage(rs.URL(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	f, err := NewFleet(hosts, BaseImage, tag)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := f.Close(); err != nil {
			b.Errorf("remove the fleet: %v", err)
		}
	})
	b.Logf("%d engines started and loaded in %s", hosts, time.Since(t0).Round(time.Millisecond))
	keys, _ := protocol.NewKeys("fleetbench")
	env := map[string]string{
		"REDIS_URL": rs.URL(), "WORKER_KEY_PREFIX": keys.Prefix, "MAX_CONCURRENT_WORKERS": strconv.Itoa(maxHost),
		"WORKER_BASE_IMAGE": BaseImage, "WORKER_PROJECT_VOLUMES": "false", "WORKER_MEMORY_LIMIT": "256m",
		"WORKER_STOP_TIMEOUT": StopTimeout.String(), "METRICS_ADDR": "127.0.0.1:0", "IDLE_TIMEOUT_SECONDS": "3600",
		"WORKER_ENV": `{"AGENT_BIN":"` + FakeAgent + `"}`,
	}
	var managers []*Manager
	for _, h := range f.Hosts {
		m, err := h.StartManager(benchLogDir(b), h.ID, env)
		if err != nil {
			b.Fatal(err)
		}
		managers = append(managers, m)
	}
	b.Cleanup(func() {
		var wg sync.WaitGroup
		t0 := time.Now()
		for _, m := range managers {
			wg.Add(1)
			go func() { defer wg.Done(); m.Terminate(StopTimeout + 60*time.Second) }()
		}
		wg.Wait()
		b.Logf("managers stopped (their workers removed) in %s", time.Since(t0).Round(time.Millisecond))
	})
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 2*ramp + 10})
	defer rc.Close()
	ctx := context.Background()
	fb := &fleetBench{b: b, rc: rc, keys: keys, replies: keys.Replies("bench"), managers: managers}
	stopFollow := fb.follow(ctx)
	defer stopFollow()
	if !waitUntil(30*time.Second, func() bool {
		n, _ := rc.ZCount(ctx, keys.Hosts(), strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
		return n == hosts
	}) {
		b.Fatalf("the %d hosts did not all join the registry within 30 s", hosts)
	}

	// One create and delete per host first: a fresh engine's first
	// container is no registration figure.
	for _, h := range f.Hosts {
		spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived, Placement: &protocol.Placement{Host: h.ID}}
		r, _, err := fb.command(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := fb.command(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: r.WorkerID}); err != nil {
			b.Fatal(err)
		}
	}

	var workers []string
	type row struct {
		n                          int
		cpu, rssMax, rssSum        float64
		ops, redisMB               float64
		create95, create99, wake99 float64
		perHost                    map[string]int
	}
	var rows []row
	for _, n := range sizes {
		probe := min(probes, n)
		grow := n - len(workers) - probe
		t0 := time.Now()
		made, _ := fb.creates(ctx, grow, ramp)
		workers = append(workers, made...)
		created := time.Since(t0)
		sequential, lat := fb.creates(ctx, probe, 1)
		workers = append(workers, sequential...)
		b.Logf("%d workers: %d made %d at a time in %s, %d one at a time", len(workers), grow, ramp, created.Round(time.Millisecond), probe)
		time.Sleep(5 * time.Second) // every wrapper up and beating

		r := row{n: len(workers), create95: percentile(lat, 95), create99: percentile(lat, 99), perHost: map[string]int{}}
		for _, w := range workers {
			r.perHost[rc.HGet(ctx, keys.Status(w), protocol.StatusFieldHost).Val()]++
		}
		r.cpu, r.rssMax, r.rssSum, r.ops, r.redisMB = fb.steady(ctx, rs, window)
		r.wake99 = percentile(fb.wakes(ctx, spreadPick(workers, probe)), 99)
		b.Logf("%d workers (%v): managers CPU %.2f %% of a core (sum of 3), RSS max %.1f MB (sum %.1f MB); Redis %.0f ops/s, %.1f MB; create p95 %.1f ms p99 %.1f ms; wake p99 %.1f ms",
			r.n, r.perHost, r.cpu, r.rssMax, r.rssSum, r.ops, r.redisMB, r.create95, r.create99, r.wake99)
		rows = append(rows, r)
		p := fmt.Sprintf("fleet-%d-", n)
		b.ReportMetric(r.cpu, p+"manager-cpu-%")
		b.ReportMetric(r.rssMax, p+"manager-rss-max-MB")
		b.ReportMetric(r.rssSum, p+"manager-rss-sum-MB")
		b.ReportMetric(r.ops, p+"redis-ops/s")
		b.ReportMetric(r.redisMB, p+"redis-memory-MB")
		b.ReportMetric(r.create95, p+"create-p95-ms")
		b.ReportMetric(r.create99, p+"create-p99-ms")
		b.ReportMetric(r.wake99, p+"wake-p99-ms")
	}
	if len(rows) >= 2 {
		first, last := rows[0], rows[len(rows)-1]
		dn := float64(last.n - first.n)
		b.ReportMetric((last.rssSum-first.rssSum)*1024/dn, "fleet-rss-per-worker-KB")
		b.ReportMetric((last.cpu-first.cpu)/dn, "fleet-cpu-per-worker-%")
		b.ReportMetric((last.redisMB-first.redisMB)*1024/dn, "fleet-redis-memory-per-worker-KB")
	}
}

// fleetBench sends the benchmark's commands and follows the lifecycle
// stream.
type fleetBench struct {
	b        *testing.B
	rc       *redis.Client
	keys     protocol.Keys
	replies  string
	managers []*Manager
	seq      int

	mu      sync.Mutex
	started map[string]time.Time // request id → its task_started event (Redis time)
	answers map[string]protocol.Reply
	at      map[string]time.Time // command id → when its reply was stored
}

func (fb *fleetBench) next(kind string) string {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.seq++
	return fmt.Sprintf("%s-%d", kind, fb.seq)
}

// follow reads the lifecycle and reply streams until stopped.
func (fb *fleetBench) follow(ctx context.Context) func() {
	fb.started, fb.answers, fb.at = map[string]time.Time{}, map[string]protocol.Reply{}, map[string]time.Time{}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	rc := redis.NewClient(&redis.Options{Addr: fb.rc.Options().Addr})
	go func() {
		defer close(done)
		defer rc.Close()
		last := map[string]string{fb.keys.Lifecycle(): "0", fb.replies: "0"}
		for ctx.Err() == nil {
			res, err := rc.XRead(ctx, &redis.XReadArgs{Streams: []string{fb.keys.Lifecycle(), fb.replies, last[fb.keys.Lifecycle()], last[fb.replies]},
				Block: time.Second, Count: 1000}).Result()
			if err != nil {
				continue
			}
			fb.mu.Lock()
			for _, s := range res {
				for _, m := range s.Messages {
					last[s.Stream] = m.ID
					data, _ := protocol.EntryData(m.Values)
					if s.Stream == fb.replies {
						if r, err := protocol.DecodeReply(data); err == nil {
							fb.answers[r.CommandID], fb.at[r.CommandID] = r, entryTime(m.ID)
						}
						continue
					}
					if l, err := protocol.DecodeLifecycle(data); err == nil && l.Event == protocol.EventTaskStarted && l.RequestID != "" {
						if _, seen := fb.started[l.RequestID]; !seen {
							fb.started[l.RequestID] = entryTime(m.ID)
						}
					}
				}
			}
			fb.mu.Unlock()
		}
	}()
	return func() { cancel(); <-done }
}

// command sends a command and waits for its reply (5 minutes at most); it
// returns the reply and the time from the XADD to the reply's entry. Any
// goroutine may call it.
func (fb *fleetBench) command(ctx context.Context, cmd protocol.Command) (protocol.Reply, time.Duration, error) {
	cmd.ID, cmd.ReplyTo, cmd.Timestamp = fb.next("cmd"), fb.replies, time.Now().UTC()
	doc, err := cmd.Encode()
	if err != nil {
		return protocol.Reply{}, 0, err
	}
	t0 := time.Now()
	if err := fb.rc.XAdd(ctx, &redis.XAddArgs{Stream: fb.keys.Commands(), Values: protocol.Values(doc)}).Err(); err != nil {
		return protocol.Reply{}, 0, err
	}
	var r protocol.Reply
	var at time.Time
	if !waitUntil(5*time.Minute, func() bool {
		fb.mu.Lock()
		defer fb.mu.Unlock()
		var ok bool
		r, ok = fb.answers[cmd.ID]
		at = fb.at[cmd.ID]
		return ok
	}) {
		return r, 0, fmt.Errorf("%s %s: no reply within 5 minutes", cmd.Action, cmd.ID)
	}
	if !r.OK {
		return r, 0, fmt.Errorf("%s %s: %+v", cmd.Action, cmd.ID, r.Error)
	}
	return r, max(0, at.Sub(t0.Truncate(time.Millisecond))), nil
}

// creates makes n workers, inFlight at a time; it returns their ids and
// each create's latency in ms.
func (fb *fleetBench) creates(ctx context.Context, n, inFlight int) ([]string, []float64) {
	ids := make([]string, n)
	lat := make([]float64, n)
	errs := make([]error, n)
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived}
			r, d, err := fb.command(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
			ids[i], lat[i], errs[i] = r.WorkerID, float64(d.Microseconds())/1000, err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fb.b.Fatal(err)
		}
	}
	return ids, lat
}

// steady measures a window with every worker idle: the managers' CPU (%
// of a core, summed), their RSS (the largest and the sum, sampled every
// second, MB), Redis's commands per second and used memory (MB).
func (fb *fleetBench) steady(ctx context.Context, rs *testkit.Redis, window time.Duration) (cpu, rssMax, rssSum, ops, redisMB float64) {
	cpu0 := 0.0
	for _, m := range fb.managers {
		cpu0 += procCPU(m.Pid())
	}
	cmds0 := redisInfo(ctx, fb.rc, "stats", "total_commands_processed")
	stats0 := commandStats(ctx, fb.rc)
	t0 := time.Now()
	for time.Since(t0) < window {
		sum := 0.0
		for _, m := range fb.managers {
			r := procRSS(m.Pid())
			sum += r
			rssMax = max(rssMax, r)
		}
		rssSum = max(rssSum, sum)
		time.Sleep(time.Second)
	}
	took := time.Since(t0).Seconds()
	cpu1 := 0.0
	for _, m := range fb.managers {
		cpu1 += procCPU(m.Pid())
	}
	cmds1 := redisInfo(ctx, fb.rc, "stats", "total_commands_processed")
	fb.b.Logf("Redis commands over the window, most called: %s", topCommands(stats0, commandStats(ctx, fb.rc), took, 6))
	// The window's own INFO calls are a handful: not worth subtracting.
	return (cpu1 - cpu0) / took * 100, rssMax, rssSum, (cmds1 - cmds0) / took, redisInfo(ctx, fb.rc, "memory", "used_memory") / 1e6
}

// wakes pauses each worker (a pause command), then, one worker at a time,
// XADDs a task to its input and measures until its task_started event; it
// returns the times in ms.
func (fb *fleetBench) wakes(ctx context.Context, workers []string) []float64 {
	for _, w := range workers {
		if _, _, err := fb.command(ctx, protocol.Command{Action: protocol.ActionPause, WorkerID: w}); err != nil {
			fb.b.Fatal(err)
		}
	}
	var out []float64
	for _, w := range workers {
		req := fb.next("wake")
		doc, _ := protocol.NewTask(req, "wake up").Encode()
		t0 := time.Now()
		if err := fb.rc.XAdd(ctx, &redis.XAddArgs{Stream: fb.keys.Input(w), Values: protocol.Values(doc)}).Err(); err != nil {
			fb.b.Fatal(err)
		}
		var at time.Time
		if !waitUntil(time.Minute, func() bool {
			fb.mu.Lock()
			defer fb.mu.Unlock()
			var ok bool
			at, ok = fb.started[req]
			return ok
		}) {
			fb.b.Fatalf("the task sent to paused worker %s did not start within a minute", w)
		}
		out = append(out, float64(max(0, at.Sub(t0.Truncate(time.Millisecond))).Microseconds())/1000)
	}
	return out
}

// spreadPick returns n of ids taken evenly along the list (creates went
// to every host in turn, so these are on every host).
func spreadPick(ids []string, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, ids[i*len(ids)/n])
	}
	return out
}

// procCPU is a process's user + system CPU time, in seconds.
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64) // utime, field 14
	st, _ := strconv.ParseFloat(f[12], 64) // stime, field 15
	return (ut + st) / 100                 // USER_HZ
}

// procRSS is a process's resident set, in MB.
func procRSS(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// redisInfo reads one numeric field of a section of INFO.
func redisInfo(ctx context.Context, rc *redis.Client, section, field string) float64 {
	s, err := rc.Info(ctx, section).Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	return 0
}

// commandStats reads the calls of every command (INFO commandstats).
func commandStats(ctx context.Context, rc *redis.Client) map[string]float64 {
	out := map[string]float64{}
	s, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return out
	}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				out[name], _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return out
}

// topCommands says the n commands called most between two commandStats,
// per second.
func topCommands(before, after map[string]float64, secs float64, n int) string {
	type c struct {
		name string
		rate float64
	}
	var cs []c
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			cs = append(cs, c{k, d / secs})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].rate > cs[j].rate })
	var parts []string
	for i := 0; i < len(cs) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %.0f/s", cs[i].name, cs[i].rate))
	}
	return strings.Join(parts, ", ")
}

// percentile is the p-th percentile of xs (nearest rank).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func waitUntil(bound time.Duration, f func() bool) bool {
	deadline := time.Now().Add(bound)
	for {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// benchLogDir is where the managers' logs go: FLEET_BENCH_LOGS, else a
// directory removed with the benchmark.
func benchLogDir(b *testing.B) string {
	if d := os.Getenv("FLEET_BENCH_LOGS"); d != "" {
		_ = os.MkdirAll(d, 0o755)
		return d
	}
	return b.TempDir()
}
