package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// BenchmarkFleetScaleCurve is the fleet's scale curve: a fleet of three
// simulated hosts (engines of their own, one worker-manager process each,
// default intervals), one Redis, grown to 10, 100 and 300 workers whose
// agent is the wrapper's fake one. At each size it reports, for the
// managers (the three processes, read from /proc): CPU in % of one core
// summed over the three, over a steady window with every worker idle;
// RSS, the largest of the three and their sum; for Redis (INFO): commands
// per second over the window and used memory; create → reply p95 and p99
// of creates sent one at a time (the last min(20, N) creates of the
// size, after the others were made 12 at a time); the registration, each
// of those creates' time less the engine's container create and start
// for it (timed by a Docker API proxy in front of each engine: the
// manager's own share, goal < 100 ms p95); a bare container create +
// start of the same image, through the same engines' API, after each of
// those creates (the baseline of the create → reply figure); and wake
// p99: a worker paused by a pause command, then a task XADDed to its
// input → its task_started event (min(20, N) workers, one at a time).
// The cost of an added worker is the slope of the managers' RSS and CPU
// and of Redis's memory and commands per second from 10 to 300 workers.
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
	// Each manager reaches its engine through a proxy that times the
	// engine's container creates and starts.
	engine := &engineTimes{at: map[string]time.Duration{}}
	var proxies []*DockerProxy
	b.Cleanup(func() {
		for _, p := range proxies {
			p.Close() // after the managers' shutdown, made through them
		}
	})
	var managers []*Manager
	for _, h := range f.Hosts {
		p, err := NewDockerProxy(h.Engine.socket())
		if err != nil {
			b.Fatal(err)
		}
		proxies = append(proxies, p)
		p.Time("POST", `^/containers/create$`, func(r *http.Request, took time.Duration) {
			engine.add("create "+r.URL.Query().Get("name"), took)
		})
		p.Time("POST", `^/containers/[^/]+/start$`, func(r *http.Request, took time.Duration) {
			engine.add("start "+strings.Split(apiVersion.ReplaceAllString(r.URL.Path, ""), "/")[2], took)
		})
		henv := map[string]string{"DOCKER_HOST": p.Host()}
		for k, v := range env {
			henv[k] = v
		}
		m, err := h.StartManager(benchLogDir(b), h.ID, henv)
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
	fb := &fleetBench{b: b, rc: rc, keys: keys, replies: keys.Replies("bench"), managers: managers, engine: engine, image: tag}
	for _, h := range f.Hosts {
		fb.engines = append(fb.engines, h.Engine.socket())
	}
	stopFollow := fb.follow(ctx)
	defer stopFollow()
	if !testkit.Poll(30*time.Second, 10*time.Millisecond, func() bool {
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
		own95, engine95, bare95    float64
		perHost                    map[string]int
	}
	var rows []row
	for _, n := range sizes {
		probe := min(probes, n)
		grow := n - len(workers) - probe
		t0 := time.Now()
		made := fb.creates(ctx, grow, ramp)
		workers = append(workers, made...)
		created := time.Since(t0)
		pr := fb.probeCreates(ctx, probe)
		workers = append(workers, pr.ids...)
		time.Sleep(5 * time.Second) // every wrapper up and beating

		r := row{n: len(workers), create95: percentile(pr.reply, 95), create99: percentile(pr.reply, 99), own95: percentile(pr.own, 95),
			engine95: percentile(pr.engine, 95), bare95: percentile(pr.bare, 95), perHost: map[string]int{}}
		for _, w := range workers {
			r.perHost[rc.HGet(ctx, keys.Status(w), protocol.StatusFieldHost).Val()]++
		}
		var top string
		r.cpu, r.rssMax, r.rssSum, r.ops, r.redisMB, top = fb.steady(ctx, rs, window)
		wakes := fb.wakes(ctx, spreadPick(workers, probe))
		r.wake99 = percentile(wakes, 99)
		// Two lines a size: a benchmark's log is cut after ten.
		b.Logf("%d workers (%v; %d made %d at a time in %s, %d one at a time): managers CPU %.2f %% of a core (sum of 3), RSS max %.1f MB (sum %.1f MB); "+
			"Redis %.0f ops/s (most called: %s), %.1f MB; create p95 %.1f ms p99 %.1f ms (the manager's share p95 %.1f ms, the engine's create + start p95 %.1f ms; "+
			"bare create + start p95 %.1f ms); wake p99 %.1f ms",
			r.n, r.perHost, grow, ramp, created.Round(time.Millisecond), probe, r.cpu, r.rssMax, r.rssSum, r.ops, top, r.redisMB,
			r.create95, r.create99, r.own95, r.engine95, r.bare95, r.wake99)
		b.Logf("%d workers, in ms and in order: create → reply %s; the manager's share %s; bare create + start %s; wake %s",
			r.n, msList(pr.reply), msList(pr.own), msList(pr.bare), msList(wakes))
		rows = append(rows, r)
		p := fmt.Sprintf("fleet-%d-", n)
		b.ReportMetric(r.cpu, p+"manager-cpu-%")
		b.ReportMetric(r.rssMax, p+"manager-rss-max-MB")
		b.ReportMetric(r.rssSum, p+"manager-rss-sum-MB")
		b.ReportMetric(r.ops, p+"redis-ops/s")
		b.ReportMetric(r.redisMB, p+"redis-memory-MB")
		b.ReportMetric(r.create95, p+"create-p95-ms")
		b.ReportMetric(r.create99, p+"create-p99-ms")
		b.ReportMetric(r.own95, p+"registration-p95-ms")
		b.ReportMetric(r.engine95, p+"engine-create-start-p95-ms")
		b.ReportMetric(r.bare95, p+"bare-create-start-p95-ms")
		b.ReportMetric(r.wake99, p+"wake-p99-ms")
	}
	if len(rows) >= 2 {
		first, last := rows[0], rows[len(rows)-1]
		dn := float64(last.n - first.n)
		b.ReportMetric((last.rssSum-first.rssSum)*1024/dn, "fleet-rss-per-worker-KB")
		b.ReportMetric((last.cpu-first.cpu)/dn, "fleet-cpu-per-worker-%")
		b.ReportMetric((last.redisMB-first.redisMB)*1024/dn, "fleet-redis-memory-per-worker-KB")
		b.ReportMetric((last.ops-first.ops)/dn, "fleet-redis-ops-per-worker")
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
	engine   *engineTimes
	engines  []string // the engines' sockets
	image    string   // the worker image the managers run
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
	if !testkit.Poll(5*time.Minute, 10*time.Millisecond, func() bool {
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

// creates makes n workers, inFlight at a time, and returns their ids.
func (fb *fleetBench) creates(ctx context.Context, n, inFlight int) []string {
	ids := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, _, err := fb.create(ctx)
			ids[i], errs[i] = r.WorkerID, err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fb.b.Fatal(err)
		}
	}
	return ids
}

func (fb *fleetBench) create(ctx context.Context) (protocol.Reply, time.Duration, error) {
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: protocol.KindLongLived}
	return fb.command(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
}

// probes are creates made one at a time, in ms: create → reply, the
// engine's container create + start for it (as the proxy timed them),
// the difference (the manager's own share), and a bare create + start
// made on the next engine in turn right after each.
type probes struct {
	ids                      []string
	reply, engine, own, bare []float64
}

// probeCreates makes n workers one at a time, each followed by a bare
// container create + start (removed after).
func (fb *fleetBench) probeCreates(ctx context.Context, n int) probes {
	var p probes
	for i := 0; i < n; i++ {
		r, d, err := fb.create(ctx)
		if err != nil {
			fb.b.Fatal(err)
		}
		if r.Worker == nil {
			fb.b.Fatalf("create %s: the reply names no container", r.WorkerID)
		}
		e, ok := fb.engine.of(r.WorkerID, r.Worker.ContainerID)
		if !ok {
			fb.b.Fatalf("create %s: the proxy timed no container create and start for it", r.WorkerID)
		}
		p.ids = append(p.ids, r.WorkerID)
		p.reply, p.engine, p.own = append(p.reply, ms(d)), append(p.engine, ms(e)), append(p.own, ms(max(0, d-e)))
		took, err := bareCreateStart(ctx, fb.engines[i%len(fb.engines)], fb.image, fmt.Sprintf("bench-bare-%d-%d", time.Now().UnixNano(), i))
		if err != nil {
			fb.b.Fatal(err)
		}
		p.bare = append(p.bare, ms(took))
	}
	return p
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// msList shows figures in ms.
func msList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(parts, " ")
}

// engineTimes are the engine's answers to the managers' container
// creates and starts, as the proxies timed them: "create <name>" and
// "start <container id>".
type engineTimes struct {
	mu sync.Mutex
	at map[string]time.Duration
}

func (e *engineTimes) add(key string, took time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at[key] += took
}

// of returns the engine's time for the container create and start of a
// worker.
func (e *engineTimes) of(workerID, containerID string) (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok1 := e.at["create agentvisor-"+workerID] // spawner.ContainerName
	s, ok2 := e.at["start "+containerID]
	return c + s, ok1 && ok2
}

// bareCreateStart creates and starts a container of image through the
// Engine API at socket, as a manager makes a worker's (host network, the
// benchmark's limits, no privileges), without the manager, and returns the
// time the two calls took; the container is removed after.
func bareCreateStart(ctx context.Context, socket, image, name string) (time.Duration, error) {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer c.CloseIdleConnections()
	call := func(method, path string, body any, want int) ([]byte, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, "http://docker"+path, rd)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			return nil, fmt.Errorf("%s %s: %s %s", method, path, resp.Status, out)
		}
		return out, nil
	}
	config := map[string]any{"Image": image, "User": "1000:1000", "HostConfig": map[string]any{
		"NetworkMode": "host", "Memory": 256 << 20, "NanoCpus": 500_000_000, "PidsLimit": 512,
		"CapDrop": []string{"ALL"}, "SecurityOpt": []string{"no-new-privileges"}, "Init": false}}
	t0 := time.Now()
	out, err := call("POST", "/containers/create?name="+name, config, http.StatusCreated)
	if err != nil {
		return 0, err
	}
	var created struct{ Id string }
	if err := json.Unmarshal(out, &created); err != nil {
		return 0, err
	}
	if _, err := call("POST", "/containers/"+created.Id+"/start", nil, http.StatusNoContent); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	_, err = call("DELETE", "/containers/"+created.Id+"?force=1", nil, http.StatusNoContent)
	return took, err
}

// steady measures a window with every worker idle: the managers' CPU (%
// of a core, summed), their RSS (the largest and the sum, sampled every
// second, MB), Redis's commands per second and used memory (MB), and the
// commands called most.
func (fb *fleetBench) steady(ctx context.Context, rs *testkit.Redis, window time.Duration) (cpu, rssMax, rssSum, ops, redisMB float64, top string) {
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
	top = topCommands(stats0, commandStats(ctx, fb.rc), took, 6)
	// The window's own INFO calls are a handful: not worth subtracting.
	return (cpu1 - cpu0) / took * 100, rssMax, rssSum, (cmds1 - cmds0) / took, redisInfo(ctx, fb.rc, "memory", "used_memory") / 1e6, top
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
		if !testkit.Poll(time.Minute, 10*time.Millisecond, func() bool {
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

// benchLogDir is where the managers' logs go: FLEET_BENCH_LOGS, else a
// directory removed with the benchmark.
func benchLogDir(b *testing.B) string {
	if d := os.Getenv("FLEET_BENCH_LOGS"); d != "" {
		_ = os.MkdirAll(d, 0o755)
		return d
	}
	return b.TempDir()
}
