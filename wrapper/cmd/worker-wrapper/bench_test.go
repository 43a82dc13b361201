package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// Benchmarks of the wrapper binary, run by `make bench` with -benchtime=1x:
// each runs its scenario once and reports its figures with ReportMetric,
// with the baseline measured in the same run.

func procField(pid int, file, field string) int64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(f)[0], 10, 64)
			return n
		}
	}
	return 0
}

// cpuNS is the CPU time a process has used, summed over its threads'
// schedstat (ns): finer than the 10 ms ticks of /proc/<pid>/stat.
func cpuNS(pid int) int64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	entries, _ := os.ReadDir(dir)
	var sum int64
	for _, e := range entries {
		b, _ := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += n
		}
	}
	return sum
}

func startBaseline(b *testing.B) *exec.Cmd {
	// The baseline: an idle Go process (the fake agent sleeping).
	cmd := exec.Command(bins.fake, "sleep-ms", "120000")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func BenchmarkIdleFootprint(b *testing.B) {
	r := testkit.StartRedis(b)
	env := append(baseEnv(r.URL(), b), "HEARTBEAT_INTERVAL=10s")
	cmd, _ := startWrapper(b, env)
	base := startBaseline(b)
	time.Sleep(2 * time.Second) // settle: connections made, first heartbeat written
	c0, b0, t0 := cpuNS(cmd.Process.Pid), cpuNS(base.Process.Pid), time.Now()
	window := 30 * time.Second
	if testing.Short() {
		window = 10 * time.Second
	}
	time.Sleep(window)
	c1, b1, el := cpuNS(cmd.Process.Pid), cpuNS(base.Process.Pid), time.Since(t0)
	rss := procField(cmd.Process.Pid, "status", "VmRSS")
	baseRSS := procField(base.Process.Pid, "status", "VmRSS")
	b.ReportMetric(float64(rss)/1024, "idle-rss-MB")
	b.ReportMetric(float64(baseRSS)/1024, "baseline-idle-go-rss-MB")
	b.ReportMetric(float64(rss)/float64(baseRSS), "rss-ratio-to-baseline")
	pct := float64(c1-c0) / float64(el.Nanoseconds()) * 100
	b.ReportMetric(pct, "idle-cpu-%-of-core")
	b.ReportMetric(float64(b1-b0)/float64(el.Nanoseconds())*100, "baseline-idle-cpu-%")
}

func percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// BenchmarkLatencies measures, over many tasks of a fake agent that
// stamps its start and exit: task XADD -> agent start, agent exit ->
// Output readable in Redis, and progress call -> Progress entry readable.
func BenchmarkLatencies(b *testing.B) {
	r, rc := testkit.StartRedisClient(b)
	defer rc.Close()
	env := append(baseEnv(r.URL(), b), "PAUSE_AFTER_OUTPUT=false", "ALLOWED_COMMANDS=worker.progress")
	startWrapper(b, env)
	keys := protocol.Keys{}
	in, out := keys.Input("bb-1"), keys.Output("bb-1")
	ctx := context.Background()
	n := 200
	if testing.Short() {
		n = 50
	}
	var toStart, toOutput, toProgress []float64
	last := "0-0" // the stream is new: "$" could miss an output written before the first XREAD
	for i := 0; i < n; i++ {
		prompt := "fake:stamp"
		if i%10 == 0 {
			prompt += " fake:progress-burst"
		}
		sent := time.Now().UnixNano()
		sendTask(b, rc, in, protocol.Task{RequestID: "lat-" + strconv.Itoa(i), Prompt: prompt})
		for done := false; !done; {
			res, err := rc.XRead(ctx, &redis.XReadArgs{Streams: []string{out, last}, Block: 10 * time.Second}).Result()
			if err != nil {
				b.Fatalf("read output: %v", err)
			}
			for _, m := range res[0].Messages {
				got := time.Now().UnixNano()
				last = m.ID
				data, _ := protocol.EntryData(m.Values)
				_, typ, _ := protocol.PeekType(data)
				if typ == protocol.TypeProgress {
					p, _ := protocol.DecodeProgress(data)
					if ns, err := strconv.ParseInt(p.Output, 10, 64); err == nil {
						toProgress = append(toProgress, float64(got-ns)/1e6)
					}
					continue
				}
				o, err := protocol.DecodeOutput(data)
				if err != nil || o.Status != protocol.StatusComplete {
					b.Fatalf("output %+v %v", o, err)
				}
				var st struct{ StartNS, ExitNS int64 }
				var raw map[string]int64
				_ = json.Unmarshal(o.Result, &raw)
				st.StartNS, st.ExitNS = raw["start_ns"], raw["exit_ns"]
				toStart = append(toStart, float64(st.StartNS-sent)/1e6)
				toOutput = append(toOutput, float64(got-st.ExitNS)/1e6)
				done = true
			}
		}
	}
	b.ReportMetric(percentile(toStart, 0.5), "xadd-to-agent-start-p50-ms")
	b.ReportMetric(percentile(toStart, 0.99), "xadd-to-agent-start-p99-ms")
	b.ReportMetric(percentile(toOutput, 0.5), "agent-exit-to-output-p50-ms")
	b.ReportMetric(percentile(toOutput, 0.99), "agent-exit-to-output-p99-ms")
	b.ReportMetric(percentile(toProgress, 0.5), "progress-to-entry-p50-ms")
	b.ReportMetric(percentile(toProgress, 0.99), "progress-to-entry-p99-ms")

	// Baselines in the same run: one Redis hop (XADD seen by a blocked
	// XREAD), and a bare fork/exec of the same fake agent (exec -> its
	// first instruction).
	hops := redisHops(rc, n)
	var execs []float64
	for i := 0; i < 50; i++ {
		before := time.Now().UnixNano()
		out, err := exec.Command(bins.fake, "-p", "fake:stamp", "--output-format", "stream-json").Output()
		if err != nil {
			b.Fatal(err)
		}
		if m := startNSRe.FindStringSubmatch(string(out)); m != nil {
			ns, _ := strconv.ParseInt(m[1], 10, 64)
			execs = append(execs, float64(ns-before)/1e6)
		}
	}
	if len(execs) == 0 {
		b.Fatal("the fake agent stamped no start")
	}
	b.ReportMetric(percentile(hops, 0.99), "baseline-redis-hop-p99-ms")
	b.ReportMetric(percentile(execs, 0.99), "baseline-bare-exec-p99-ms")
}

var startNSRe = regexp.MustCompile(`start_ns[^0-9]*([0-9]+)`)

// redisHops measures n Redis hops (ms): an XADD seen by an XREAD blocked
// on the stream, from before the XADD to the XREAD's return.
func redisHops(rc *redis.Client, n int) []float64 {
	ctx := context.Background()
	var hops []float64
	hop := "bench:hop"
	for i := 0; i < n; i++ {
		got := make(chan float64, 1)
		go func() {
			res, err := rc.XRead(ctx, &redis.XReadArgs{Streams: []string{hop, "$"}, Block: 5 * time.Second}).Result()
			if err != nil {
				got <- -1
				return
			}
			sent, _ := strconv.ParseInt(res[0].Messages[0].Values["ns"].(string), 10, 64)
			got <- float64(time.Now().UnixNano()-sent) / 1e6
		}()
		time.Sleep(2 * time.Millisecond) // the reader is blocked
		rc.XAdd(ctx, &redis.XAddArgs{Stream: hop, Values: map[string]any{"ns": time.Now().UnixNano()}})
		hops = append(hops, <-got)
	}
	return hops
}

// claudeAndStub finds the real claude CLI and starts a stub model that
// completes every request; the stub stops when the benchmark ends.
func claudeAndStub(b testing.TB) (string, *stubmodel.Server) {
	return realCLI(b, protocol.AgentClaude), completingStub(b)
}

// realCLI is the path of the real CLI of agentType, installed by `make
// setup`.
func realCLI(b testing.TB, agentType protocol.AgentType) string {
	bin, err := exec.LookPath(string(agentType))
	if err != nil {
		b.Fatalf("the real %s CLI is not installed (run `make setup`): %v", agentType, err)
	}
	return bin
}

// completingStub starts a stub model that answers every request at once
// with a stop output, complete; it stops when the benchmark ends.
func completingStub(b testing.TB) *stubmodel.Server {
	stub, err := stubmodel.Start(stubmodel.Script{Fallback: &stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stub.Close() })
	return stub
}

// BenchmarkTaskOverhead runs the same real `claude -p` task directly and
// through the wrapper against the same stub, and reports the ratio of the
// median wall times.
func BenchmarkTaskOverhead(b *testing.B) {
	claude, stub := claudeAndStub(b)
	home, ws := b.TempDir(), b.TempDir()
	agentEnv := []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "ANTHROPIC_BASE_URL=" + stub.URL,
		"ANTHROPIC_API_KEY=x", "IS_SANDBOX=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"}
	r, rc := testkit.StartRedisClient(b)
	defer rc.Close()
	env := append(agentEnv, "WORKER_ID=bb-1", "REDIS_URL="+r.URL(), "AGENT_TYPE=claude", "AGENT_BIN="+claude,
		"WORKSPACE="+ws, "PAUSE_AFTER_OUTPUT=false")
	startWrapper(b, env)
	keys := protocol.Keys{}
	last := "0-0" // the stream is new: "$" could miss an output written before the first XREAD
	// Direct and wrapped runs alternate, so that drift of the machine
	// (caches, other load) weighs on both alike; every wrapped task starts
	// a new session, as every direct run does.
	runs := 9
	var direct, wrapped []float64
	for i := 0; i < runs; i++ {
		cmd := exec.Command(claude, "-p", "do it", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions")
		cmd.Env, cmd.Dir = agentEnv, ws
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("claude: %v\n%s", err, out)
		}
		direct = append(direct, float64(time.Since(t0).Milliseconds()))

		t0 = time.Now()
		sendTask(b, rc, keys.Input("bb-1"), protocol.Task{RequestID: "wall-" + strconv.Itoa(i), Prompt: "do it", ForceNewSession: true})
		res, err := rc.XRead(context.Background(), &redis.XReadArgs{Streams: []string{keys.Output("bb-1"), last}, Block: time.Minute}).Result()
		if err != nil {
			b.Fatal(err)
		}
		last = res[0].Messages[0].ID
		wrapped = append(wrapped, float64(time.Since(t0).Milliseconds()))
	}
	d, w := percentile(direct, 0.5), percentile(wrapped, 0.5)
	b.ReportMetric(d, "direct-claude-median-ms")
	b.ReportMetric(w, "via-wrapper-median-ms")
	b.ReportMetric(w/d, "wall-time-ratio")
}
