//go:build ignore

// Command benchtable turns the output of the project's benchmarks (`go test
// -bench` lines with ReportMetric figures) into BENCHMARKS.md: every
// figure with its goal, the baseline measured in the same run, and the
// ratio. `make bench` runs it:
//
//	go run scripts/benchtable.go -o BENCHMARKS.md bench-output.txt...
//
// It exits 1 when a figure is missing or misses its goal (the table is
// written all the same). A figure given twice (a partial run appended to
// an earlier run's output) counts as its last value, and BENCHMARKS.md
// names the partial runs.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// row is one line of the table.
type row struct {
	figure string
	metric string // the ReportMetric unit of the figure
	unit   string // how the value reads
	goal   string // as people read it; "" for a figure without a goal
	ok     func(v, base float64) bool
	base   []string // metrics summed into the baseline; none when there is none
	what   string   // what the baseline is
}

func atMost(x float64) func(v, base float64) bool { return func(v, _ float64) bool { return v <= x } }
func below(x float64) func(v, base float64) bool  { return func(v, _ float64) bool { return v < x } }
func addedAtMost(x float64) func(v, base float64) bool {
	return func(v, base float64) bool { return base > 0 && v-base <= x }
}
func ratioAtMost(x float64) func(v, base float64) bool {
	return func(v, base float64) bool { return base > 0 && v/base <= x }
}

var rows = slices.Concat([]row{
	{"Wrapper idle RSS", "idle-rss-MB", "MB", "≤ 15 MB", atMost(15), []string{"baseline-idle-go-rss-MB"}, "an idle Go process"},
	{"Wrapper idle CPU, 10 s heartbeats", "idle-cpu-%-of-core", "% of a core", "< 0.05 %", below(0.05), []string{"baseline-idle-cpu-%"}, "an idle Go process"},
	{"Task XADD → agent start, p99", "xadd-to-agent-start-p99-ms", "ms", "< 10 ms", below(10),
		[]string{"baseline-redis-hop-p99-ms", "baseline-bare-exec-p99-ms"}, "one Redis hop + a bare fork/exec"},
	{"Agent exit → Output in Redis, p99", "agent-exit-to-output-p99-ms", "ms", "< 5 ms", below(5), []string{"baseline-redis-hop-p99-ms"}, "one Redis hop"},
	{"Task output stored with WAIT for 1 replica (real primary + replica through the sentinels), p99", "finish-wait-p99-ms", "ms", "≤ baseline + 1 ms", addedAtMost(1),
		[]string{"finish-no-wait-p99-ms"}, "the same finish script without WAIT, alternating blocks"},
	{"Task output stored with WAIT for 1 replica, median", "finish-wait-median-ms", "ms", "≤ baseline + 0.5 ms", addedAtMost(0.5),
		[]string{"finish-no-wait-median-ms"}, "the same finish script without WAIT"},
	{"Progress call → Progress entry, p99", "progress-to-entry-p99-ms", "ms", "< 5 ms", below(5), []string{"baseline-redis-hop-p99-ms"}, "one Redis hop"},
	{"Model API call through the wrapper's proxy, p99", "model-api-via-proxy-p99-ms", "ms", "≤ baseline + 1 ms", addedAtMost(1),
		[]string{"model-api-direct-p99-ms"}, "the same streaming call straight to the stub model"},
	{"Real claude task through the wrapper, no CPU limit (wrapper and claude as host processes), median", "via-wrapper-median-ms", "ms", "ratio ≤ 1.05", ratioAtMost(1.05),
		[]string{"direct-claude-median-ms"}, "the same claude -p run directly"},
	{"Real claude task through a worker container at the default CPU limit (0.5 CPU), median", "worker-cpu-0.5-median-ms", "ms", "", nil,
		[]string{"direct-claude-host-median-ms"}, "the same claude -p run directly, no limit"},
	{"The wrapper's own share of that task (wall time − the agent's run), median", "worker-cpu-0.5-wrapper-share-median-ms", "ms", "< 10 ms", below(10), nil, ""},
}, agentRows(), []row{
	{"Cancel of a running task → cancelled Output, claude per task, max of 10", "cancel-per-task-max-ms", "ms", "< 2000 ms", below(2000), nil, ""},
	{"Cancel of a running task → cancelled Output, persistent claude, max of 10", "cancel-persistent-max-ms", "ms", "< 200 ms", below(200), nil, ""},
	{"Cancel of a running task in a worker container at the default limits (sealed, 0.5 CPU) → cancelled Output, claude per task, p50 of 10", "cancel-worker-per-task-p50-ms", "ms", "", nil, nil, ""},
	{"Cancel of a running task in a worker container at the default limits (sealed, 0.5 CPU) → cancelled Output, claude per task, max of 10 (a bound on the p99)", "cancel-worker-per-task-p99-ms", "ms", "< 500 ms", below(500), nil, ""},
	{"Cancel of a running task in a worker container at the default limits (sealed, 0.5 CPU) → cancelled Output, persistent claude, p50 of 10", "cancel-worker-persistent-p50-ms", "ms", "", nil, nil, ""},
	{"Cancel of a running task in a worker container at the default limits (sealed, 0.5 CPU) → cancelled Output, persistent claude, max of 10 (a bound on the p99)", "cancel-worker-persistent-p99-ms", "ms", "< 500 ms", below(500), nil, ""},
	{"Session store save (SessionFiles.Save: the files read, JSON, gzip, SET) of a ~1 MB Claude transcript, median per MB of the files", "session-save-1MB-ms-per-MB", "ms/MB", "", nil,
		[]string{"session-bare-set-1MB-ms-per-MB"}, "the same bytes read from the file and SET as they are"},
	{"Session store restore (SessionFiles.Restore: GET, gunzip, JSON, the files written) of a ~1 MB Claude transcript, median per MB", "session-restore-1MB-ms-per-MB", "ms/MB", "", nil,
		[]string{"session-bare-get-1MB-ms-per-MB"}, "the same bytes GET and written to a file as they are"},
	{"Session store save of a ~16 MB Claude transcript, median per MB", "session-save-16MB-ms-per-MB", "ms/MB", "", nil,
		[]string{"session-bare-set-16MB-ms-per-MB"}, "the same bytes read from the file and SET as they are"},
	{"Session store restore of a ~16 MB Claude transcript, median per MB", "session-restore-16MB-ms-per-MB", "ms/MB", "", nil,
		[]string{"session-bare-get-16MB-ms-per-MB"}, "the same bytes GET and written to a file as they are"},
	{"Session store blob of a ~16 MB Claude transcript, size as a fraction of the files", "session-16MB-stored-fraction", "", "", nil,
		[]string{"session-16MB-gzip-fraction"}, "gzip of the bare transcript"},
	{"A git task's own steps (worktree fetched and checked out, a one-file change committed, pushed and described, the base fetched again for the merge check: gitwork Prepare + Finish), follow-up on one branch, median of 20", "gitwork-task-median-ms", "ms", "", nil,
		[]string{"gitwork-bare-median-ms"}, "the same fetch, checkout, add, commit and push run bare, alternating"},
	{"EnsureImage of an existing image, p99", "ensure-hit-p99-ms", "ms", "< 20 ms", below(20), []string{"bare-inspect-p99-ms"}, "a bare ImageInspect"},
	{"A project's own image from its devcontainer.json and Dockerfile (the project's build, no network, then the wrapper and claude layered on it), cold", "project-build-cold-ms", "ms", "", nil,
		[]string{"project-build-cached-median-ms"}, "the same image asked for again, unchanged (no build), median of 5"},
	{"Create → wrapper's started event, median", "create-to-started-median-ms", "ms", "ratio ≤ 1.3", ratioAtMost(1.3),
		[]string{"bare-docker-run-first-line-median-ms"}, "bare docker run of the same image, to its first line"},
	{"Create → wrapper's started event, sealed worker (gateway sockets, no network), median", "sealed-create-to-started-median-ms", "ms", "ratio ≤ 1.1", ratioAtMost(1.1),
		[]string{"host-create-to-started-median-ms"}, "the same create with host networking, alternating in the same run"},
	{"Create → wrapper's started event with the default disk limit (10g: a sparse file made ext4, loop-mounted and bound over a read-only root), median", "disk-create-to-started-median-ms", "ms", "ratio ≤ 1.1", ratioAtMost(1.1),
		[]string{"nodisk-create-to-started-median-ms"}, "the same create without a disk limit, alternating in the same run"},
	{"A fresh 10g disk's share of the host's disk (the sparse file's blocks after the wrapper started)", "disk-fresh-host-MB", "MB", "≤ 16 MB", atMost(16), nil, ""},
	{"Create → wrapper's started event, sealed worker in gVisor (runsc), fake agent, median of 7", "gvisor-create-to-started-median-ms", "ms", "", nil,
		[]string{"runc-create-to-started-median-ms"}, "the same sealed create under runc, alternating in the same run"},
	{"One task (fake agent) in a sealed worker in gVisor, task XADD → Output, median", "gvisor-fake-task-median-ms", "ms", "", nil,
		[]string{"runc-fake-task-median-ms"}, "the same task in the same worker under runc, alternating"},
	{"Memory of an idle sealed worker in gVisor (its memory cgroup: the wrapper, gVisor's kernel and gofer), median of 7", "gvisor-idle-worker-memory-MB", "MB", "", nil,
		[]string{"runc-idle-worker-memory-MB"}, "the same idle worker under runc (the wrapper)"},
	{"Real claude task in a sealed worker in gVisor (0.5 CPU), task XADD → Output, median of 7", "gvisor-claude-task-median-ms", "ms", "", nil,
		[]string{"runc-claude-task-median-ms"}, "the same task in a sealed worker under runc, alternating"},
	{"Create → wrapper's started event, sealed DOCKER worker (rootless Podman inside: its image, seccomp profile and storage tmpfs), median of 7", "docker-create-to-started-median-ms", "ms", "ratio ≤ 1.3", ratioAtMost(1.3),
		[]string{"plain-create-to-started-median-ms"}, "the same sealed create without DOCKER, alternating"},
	{"docker run --rm of a small image (FROM scratch, a static binary) by a sealed DOCKER worker's own engine, timed inside the worker, median of 12", "inner-docker-run-median-ms", "ms", "", nil,
		[]string{"host-docker-run-median-ms"}, "the same docker run --rm --network none on the host's engine, alternating in rounds"},
	{"Unpause → task picked up, p99", "unpause-to-pickup-p99-ms", "ms", "< 100 ms", below(100), []string{"bare-unpause-p99-ms"}, "a bare ContainerUnpause"},
	{"Wake from pause (task XADD → task started), p99 of 20, held to a bare unpause", "unpause-to-pickup-p99-ms", "ms", "ratio ≤ 2", ratioAtMost(2),
		[]string{"bare-unpause-p99-ms"}, "a bare ContainerUnpause of the same worker, p99 of 20"},
	{"Wake from pause of a worker paused the moment before (the task comes while the wake loop's read does not watch it yet), p99 of 20", "unpause-just-paused-to-pickup-p99-ms", "ms", "", nil,
		[]string{"bare-unpause-p99-ms"}, "a bare ContainerUnpause of the same worker, p99 of 20"},
	{"docker kill mid-task → failed Output, max", "crash-to-failed-output-max-ms", "ms", "< 1000 ms", below(1000), nil, ""},
	{"100 workers: all created and started", "start-100-s", "s", "", nil, nil, ""},
	{"100 workers: memory per worker", "memory-per-worker-MB", "MB", "", nil, []string{"bare-container-memory-MB"}, "a bare container of the same image, idle"},
	{"100 workers: oldest heartbeat seen (during 100 tasks at once)", "heartbeat-age-max-ms", "ms", "ratio < 2 (dead after 3)", ratioAtMost(2),
		[]string{"heartbeat-interval-ms"}, "the heartbeat interval"},
	{"100 tasks at once on 100 workers: XADD → Output, p99", "task-100-concurrent-p99-ms", "ms", "", nil,
		[]string{"task-single-median-ms"}, "the same task on one worker alone, median"},
	{"Manager shutdown of 20 workers", "shutdown-20-s", "s", "≤ 30 s", atMost(30), []string{"bare-docker-rm-20-s"}, "docker rm -f of 20 bare containers"},
	{"Containers left after that shutdown", "containers-left", "", "0", atMost(0), nil, ""},
	{"Warm pool allocation (create → worker ready), p99", "pool-allocation-p99-ms", "ms", "< 30 ms", below(30),
		[]string{"cold-create-p99-ms"}, "a cold create of the same worker, p99"},
	{"First task from a warm pool (create + first Output, real claude), median", "first-task-warm-median-ms", "ms", "ratio ≤ 0.3", ratioAtMost(0.3),
		[]string{"first-task-cold-median-ms"}, "the same from a cold create"},
	{"Wake from hibernation (task XADD → task started, real claude, the session resumed from the project volume), p50 of 12", "hib-wake-p50-ms", "ms", "< 1000 ms", below(1000),
		[]string{"hib-cold-create-first-task-p50-ms"}, "a cold create + first task (create → task started), p50 of 12"},
	{"Create at the limit: the call → container started, the worker idle longest hibernated first to free its slot (fake agent), p50 of 10", "evict-create-p50-ms", "ms", "≤ baseline + 1000 ms", addedAtMost(1000),
		[]string{"free-slot-create-p50-ms"}, "a create with a slot free, alternating, p50 of 10"},
	{"Wake from hibernation, max of 12 (a bound on the p99)", "hib-wake-max-ms", "ms", "< 2000 ms", below(2000),
		[]string{"hib-cold-create-first-task-max-ms"}, "a cold create + first task, max of 12"},
	{"Wake from hibernation with the project volume gone (as on another host: the session restored from the session store), p50 of 12", "hib-wake-store-p50-ms", "ms", "< 1000 ms", below(1000),
		[]string{"hib-cold-create-first-task-p50-ms"}, "a cold create + first task, p50 of 12"},
	{"Wake from hibernation with the project volume gone, max of 12 (a bound on the p99)", "hib-wake-store-max-ms", "ms", "< 2000 ms", below(2000),
		[]string{"hib-cold-create-first-task-max-ms"}, "a cold create + first task, max of 12"},
	{"Wake from hibernation into a warm pool worker (task XADD → task started, real claude, the session resumed), p50 of 12", "pool-wake-p50-ms", "ms", "ratio ≤ 0.8", ratioAtMost(0.8),
		[]string{"made-wake-p50-ms"}, "a wake that makes a container (a spec no pool has), same rounds, p50 of 12"},
	{"Wake from hibernation into a warm pool worker, max of 12 (a bound on the p99)", "pool-wake-max-ms", "ms", "< 2000 ms", below(2000),
		[]string{"made-wake-max-ms"}, "a wake that makes a container, max of 12"},
	{"100 hibernated workers: containers left", "hib-containers-left", "", "0", atMost(0), nil, ""},
	{"100 hibernated workers: Redis bytes per worker (MEMORY USAGE of its keys, its session store blob included), mean", "hib-redis-bytes-per-worker", "bytes", "", nil,
		[]string{"hib-awake-redis-bytes-per-worker"}, "the same keys while it was awake and idle"},
	{"Task send → agent start in a worker container, metrics on, p99", "xadd-to-agent-start-metrics-p99-ms", "ms", "ratio ≤ 1.05", ratioAtMost(1.05),
		[]string{"xadd-to-agent-start-no-metrics-p99-ms"}, "the same, metrics off (alternating blocks, one worker)"},
	{"Listing every worker (Fleet.Workers: each /metrics scrape, dashboard page, workerctl list), 100 awake and 100 hibernated on 3 hosts, p99", "fleet-workers-p99-us", "µs", "≤ baseline + 500 µs", addedAtMost(500),
		[]string{"workers-smembers-p99-us"}, "SMEMBERS of the workers set alone (the listing without the hibernated), alternating blocks"},
	{"Listing every worker, median", "fleet-workers-p50-us", "µs", "", nil,
		[]string{"workers-smembers-p50-us"}, "SMEMBERS of the workers set alone, median"},
	{"Manager RSS, 100 workers, dashboard open", "manager-rss-dashboard-MB", "MB", "", nil,
		[]string{"manager-rss-before-dashboard-MB"}, "the same process before the dashboard opened"},
	{"Redis memory after 10 000 tasks (retention bounds set short)", "redis-memory-after-MB", "MB", "ratio ≤ 1.1", ratioAtMost(1.1),
		[]string{"redis-memory-before-MB"}, "Redis memory after a warm-up that filled every capped stream"},
	{"Streaming model call through the wrapper's proxy and the worker gateway's model.sock (a sealed worker's path: plain HTTP with the worker's token to the gateway, HTTPS from it to the model), p99", "model-api-proxy-gateway-p99-ms", "ms", "≤ baseline + 1 ms", addedAtMost(1),
		[]string{"model-api-proxy-direct-p99-ms"}, "the same proxy speaking HTTPS to the model directly, alternating in the same run"},
	{"Redis PING through the worker gateway (unix socket → relay → TCP), open connection, p99", "redis-ping-gateway-p99-us", "µs", "≤ baseline + 100 µs", addedAtMost(100),
		[]string{"redis-ping-direct-p99-us"}, "the same PING straight to Redis over TCP, alternating"},
	{"New Redis connection and PING through a worker gateway following a Sentinel primary (the sentinels asked when the 1 s cache runs out), p99", "redis-connect-gateway-sentinel-p99-us", "µs", "≤ baseline + 500 µs", addedAtMost(500),
		[]string{"redis-connect-gateway-direct-p99-us"}, "the same through a gateway relaying to the primary's host:port, alternating"},
	{"HTTPS GET through the worker gateway's egress.sock (CONNECT → allowlist → dial → relay, TLS handshake, GET; new connection), p99", "egress-https-gateway-p99-ms", "ms", "≤ baseline + 2 ms", addedAtMost(2),
		[]string{"egress-https-direct-p99-ms"}, "the same HTTPS GET straight to the loopback TLS server, alternating"},
	{"Worker gateway RSS, 100 workers open", "gateway-100-workers-rss-MB", "MB", "< 30 MB", below(30),
		[]string{"gateway-idle-rss-MB"}, "the same process with no worker"},
	{"Fleet of 3 hosts, 300 workers: manager RSS, largest of the 3", "fleet-300-manager-rss-max-MB", "MB", "< 50 MB", below(50),
		[]string{"fleet-10-manager-rss-max-MB"}, "the same at 10 workers"},
	{"Fleet of 3 hosts, 300 workers: registration, the manager's share of a create (create → reply less the engine's container create + start, timed by an API proxy), p95",
		"fleet-300-registration-p95-ms", "ms", "< 100 ms", below(100), []string{"fleet-10-registration-p95-ms"}, "the same at 10 workers"},
	{"Kubernetes (make k8s's one node): create → the wrapper's started, median of 5", "k8s-create-to-started-median-ms", "ms", "ratio ≤ 1.5", ratioAtMost(1.5),
		[]string{"baseline-k8s-bare-pod-running-median-ms"}, "a bare pod of the same image and hardening made with client-go and watched to Running, median of 5"},
	{"Kubernetes: a task on a hibernated worker (the pause after its output hibernated it: the wake makes a pod) → its output, median of 5", "k8s-wake-task-median-ms", "ms", "< 1000 ms", below(1000),
		[]string{"baseline-k8s-running-task-median-ms"}, "the same task on the worker while its pod ran, median of 5"},
	{"Kubernetes: the manager's RSS at rest, 6 workers made", "k8s-manager-rss-MB", "MB", "< 60 MB", below(60), nil, ""},
	{"Kubernetes, 100 workers: the manager's RSS at rest", "k8s-100-manager-rss-MB", "MB", "< 60 MB", below(60),
		[]string{"baseline-k8s-1-manager-rss-MB"}, "the same process with one worker"},
	{"Kubernetes, 100 workers: the manager's requests to the API server at rest (its service account's in the audit log, over 30 s)", "k8s-100-api-requests-per-s", "per s", "< 0.1", below(0.1), nil, ""},
	{"Fleet of 3 hosts, 300 workers: create → reply, p95", "fleet-300-create-p95-ms", "ms", "ratio ≤ 1.3", ratioAtMost(1.3),
		[]string{"fleet-300-bare-create-start-p95-ms"}, "a bare container create + start of the same image on the same engines, p95"},
})

// benchAgents are the real agents BenchmarkAgents (wrapper/cmd/worker-wrapper)
// runs, whose metrics are named <agent>-<figure>: each with its name as
// people read it, its persistent process, the process per task that is
// held against, and the goal of that ratio. Where a process takes seconds
// to start (Droid; OpenCode and Qwen Code, whose bundle Node.js loads, as
// wrapper/README.md says), the persistent process is to save nearly all
// of a follow-up (≤ 0.1); where one starts in under a second (Claude,
// Codex), it is to save something (< 1).
var benchAgents = []struct {
	agent, name, persistent, perTask, goal string
	ratio                                  float64
}{
	{"claude", "Claude", "Claude process", "a claude process per task", "ratio < 1", 0.99},
	{"droid", "Droid", "Droid process (JSON-RPC mode)", "a droid exec per task", "ratio ≤ 0.1", 0.1},
	{"codex", "Codex", "Codex process (codex app-server)", "a codex exec per task", "ratio < 1", 0.99},
	{"opencode", "OpenCode", "OpenCode process (one ACP process)", "an opencode acp process per task", "ratio ≤ 0.1", 0.1},
	{"qwen", "Qwen Code", "Qwen Code process (one ACP process)", "a qwen --acp process per task", "ratio ≤ 0.1", 0.1},
}

// agentRows are BenchmarkAgents' rows, a figure at a time for every agent.
func agentRows() []row {
	var rows []row
	for _, a := range benchAgents {
		m := a.agent + "-"
		rows = append(rows, row{"Task XADD → agent start (the wrapper's task_started event), real " + a.name + ", a process per task, p50 of 20",
			m + "xadd-to-agent-start-p50-ms", "ms", "< 10 ms", below(10), []string{m + "baseline-redis-hop-p50-ms", m + "baseline-bare-start-p50-ms"},
			"one Redis hop + a bare start of " + a.agent + " (its exec returned), p50s"})
	}
	for _, a := range benchAgents {
		m := a.agent + "-"
		// No goal on a max of 20 real CLIs' starts: one slow exec on a
		// loaded machine decides it (the fake agent's p99 row has one).
		rows = append(rows, row{"Task XADD → agent start, real " + a.name + ", a process per task, max of 20 (a bound on the p99)",
			m + "xadd-to-agent-start-p99-ms", "ms", "", nil, []string{m + "baseline-redis-hop-p99-ms", m + "baseline-bare-start-p99-ms"},
			"one Redis hop + a bare start of " + a.agent + ", maxes"})
	}
	for _, a := range benchAgents {
		m := a.agent + "-"
		rows = append(rows, row{"First task of a fresh worker (XADD → Output, one model call), real " + a.name + ", a process per task, median of 3",
			m + "first-task-median-ms", "ms", "", nil, []string{m + "first-task-agent-run-median-ms"},
			"the agent's run in those tasks, as the wrapper timed it (their duration_ms), median"})
	}
	for _, a := range benchAgents {
		m := a.agent + "-"
		rows = append(rows, row{"Follow-up task, persistent " + a.persistent + ", median", m + "follow-up-persistent-median-ms", "ms",
			a.goal, ratioAtMost(a.ratio), []string{m + "follow-up-per-task-median-ms"}, a.perTask})
	}
	return rows
}

// The scale curve (BenchmarkFleetScaleCurve, faults/): one line per fleet
// size, from the metrics fleet-<N>-<figure>.
var curve = []struct{ head, metric, format string }{
	{"Managers' CPU, sum of 3 (% of a core)", "manager-cpu-%", "%s %%"},
	{"Manager RSS, largest of 3", "manager-rss-max-MB", "%s MB"},
	{"Managers' RSS, sum of 3", "manager-rss-sum-MB", "%s MB"},
	{"Redis commands/s", "redis-ops/s", "%s"},
	{"Redis memory", "redis-memory-MB", "%s MB"},
	{"Create → reply p95", "create-p95-ms", "%s ms"},
	{"Create → reply p99", "create-p99-ms", "%s ms"},
	{"Registration p95 (the manager's share)", "registration-p95-ms", "%s ms"},
	{"Engine's create + start of those creates, p95", "engine-create-start-p95-ms", "%s ms"},
	{"Bare create + start p95", "bare-create-start-p95-ms", "%s ms"},
	{"Wake p99 (task XADD → task started)", "wake-p99-ms", "%s ms"},
}

// scaleTable is the scale curve's table and its cost per added worker;
// "" when the benchmark did not run.
func scaleTable(metrics map[string]float64) string {
	var sizes []int
	for m := range metrics {
		if rest, ok := strings.CutPrefix(m, "fleet-"); ok {
			if n, err := strconv.Atoi(strings.TrimSuffix(rest, "-manager-cpu-%")); err == nil && strings.HasSuffix(rest, "-manager-cpu-%") {
				sizes = append(sizes, n)
			}
		}
	}
	if len(sizes) == 0 {
		return ""
	}
	sort.Ints(sizes)
	var b strings.Builder
	b.WriteString("\nScale curve: a fleet of 3 hosts (each a Docker engine with its worker-manager, one Redis), workers with the fake agent, " +
		"CPU, RSS and Redis over a 30 s window with every worker idle; create and wake one at a time, over the last 20 creates of the size " +
		"and 20 workers paused then sent a task (10 of each at 10 workers); the registration is each of those creates less the engine's " +
		"container create + start for it, as a Docker API proxy in front of each engine timed them, and each create is followed by a bare " +
		"container create + start of the same image on the next engine (BenchmarkFleetScaleCurve in faults/). " +
		"The design's goal, registration under 100 ms p95, is the worker becoming known to the control plane: it is held against the " +
		"manager's share. Create → reply also holds the engine's own container create and start (about 100 ms alone on this machine), " +
		"so its row is held against a bare create + start measured alongside, ratio ≤ 1.3.\n\n| Workers |")
	for _, c := range curve {
		b.WriteString(" " + c.head + " |")
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|", len(curve)) + "\n")
	for _, n := range sizes {
		fmt.Fprintf(&b, "| %d |", n)
		for _, c := range curve {
			v, ok := metrics[fmt.Sprintf("fleet-%d-%s", n, c.metric)]
			cell := "—"
			if ok {
				cell = fmt.Sprintf(c.format, num(v))
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	if rss, ok := metrics["fleet-rss-per-worker-KB"]; ok {
		cpu := num(metrics["fleet-cpu-per-worker-%"]) + " %"
		if math.Abs(metrics["fleet-cpu-per-worker-%"]) < 0.001 {
			cpu = "under 0.001 %" // the window's noise: the managers' CPU does not grow with idle workers
		}
		fmt.Fprintf(&b, "\nCost per added worker (slope from %d to %d workers): managers' RSS %s KB, managers' CPU %s of a core, Redis memory %s KB",
			sizes[0], sizes[len(sizes)-1], num(rss), cpu, num(metrics["fleet-redis-memory-per-worker-KB"]))
		if ops, ok := metrics["fleet-redis-ops-per-worker"]; ok {
			fmt.Fprintf(&b, ", Redis %s commands/s while idle", num(ops))
		}
		b.WriteString(".\n")
	}
	return b.String()
}

func main() {
	out := flag.String("o", "BENCHMARKS.md", "the markdown file to write")
	readme := flag.String("readme", "", "also put the table between the bench markers of this file")
	flag.Parse()
	metrics := map[string]float64{}
	var partial []string // the partial runs appended to the files, in order
	for _, path := range flag.Args() {
		if err := read(path, metrics, &partial); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(2)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nWritten by `make bench` (scripts/benchtable.go) on %s: %d cores, %s, Docker engine %s. ",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(), dockerVersion())
	if len(partial) > 0 {
		fmt.Fprintf(&b, "After the last full run, partial runs (`make bench BENCH=<regexp>`) replaced the figures of the benchmarks they matched: %s. ",
			strings.Join(partial, ", then "))
	}
	b.WriteString("Each figure comes with the baseline measured in the same run and the ratio of the two; " +
		"the benchmarks and what they run are described in wrapper/README.md and spawner/README.md.\n\n")
	tableAt := b.Len()
	b.WriteString("| Figure | Value | Goal | Baseline (same run) | Ratio | Meets goal |\n|---|---:|---|---|---:|:---:|\n")
	failed := 0
	for _, r := range rows {
		v, ok := metrics[r.metric]
		if !ok {
			fmt.Fprintf(&b, "| %s | not measured | %s | | | ✗ |\n", r.figure, dash(r.goal))
			failed++
			continue
		}
		base, haveBase := 0.0, len(r.base) > 0
		for _, m := range r.base {
			x, ok := metrics[m]
			haveBase = haveBase && ok
			base += x
		}
		baseText, ratio := "—", "—"
		if haveBase {
			baseText = fmt.Sprintf("%s %s: %s", num(base), r.unit, r.what)
			if base > 0 {
				ratio = fmt.Sprintf("%.2f", v/base)
			}
		}
		verdict := "—"
		if r.ok != nil {
			verdict = "✓"
			if !r.ok(v, base) {
				verdict = "✗"
				failed++
			}
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s | %s | %s | %s |\n", r.figure, num(v), r.unit, dash(r.goal), baseText, ratio, verdict)
	}
	// Cold builds and sizes, one row per capability set.
	var builds []string
	for m := range metrics {
		if strings.HasPrefix(m, "build-s-") {
			builds = append(builds, strings.TrimPrefix(m, "build-s-"))
		}
	}
	sort.Strings(builds)
	for _, name := range builds {
		fmt.Fprintf(&b, "| Cold image build, %s | %s s | — | — | — | — |\n", name, num(metrics["build-s-"+name]))
		if size, ok := metrics["size-MB-"+name]; ok {
			base, ok := metrics["worker-base-MB"]
			if ok && base > 0 {
				fmt.Fprintf(&b, "| Image size, %s | %s MB | — | %s MB: worker-base | %.2f | — |\n", name, num(size), num(base), size/base)
			}
		}
	}
	b.WriteString(scaleTable(metrics))
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	if *readme != "" {
		if err := splice(*readme, b.String()[tableAt:]); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(2)
		}
	}
	fmt.Printf("benchtable: wrote %s (%d figures; %d missing or missing their goal)\n", *out, len(rows)+2*len(builds), failed)
	if failed > 0 {
		os.Exit(1)
	}
}

// The table goes between these lines of the -readme file (docs/testing.md).
const (
	beginMark = "<!-- bench:begin (make bench writes this table) -->"
	endMark   = "<!-- bench:end -->"
)

func splice(path, table string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(data)
	i, j := strings.Index(text, beginMark), strings.Index(text, endMark)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q ... %q lines", path, beginMark, endMark)
	}
	text = text[:i+len(beginMark)] + "\n" + table + text[j:]
	return os.WriteFile(path, []byte(text), 0o644)
}

// partialMark starts the line `make bench BENCH=<regexp>` writes before
// the output of a partial run: "# make bench BENCH=<regexp> <UTC time>".
const partialMark = "# make bench BENCH="

// read collects "value unit" pairs from the Benchmark lines of a file,
// and the partial runs it holds, as "`<regexp>` (<time>)".
func read(path string, metrics map[string]float64, partial *[]string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), partialMark); ok {
			if i := strings.LastIndexByte(rest, ' '); i > 0 {
				*partial = append(*partial, fmt.Sprintf("`%s` (%s)", rest[:i], rest[i+1:]))
			}
			continue
		}
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		// Name, iterations, then value/unit pairs.
		for i := 2; i+1 < len(fields); i += 2 {
			if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
				metrics[fields[i+1]] = v
			}
		}
	}
	return sc.Err()
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 0.1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func dockerVersion() string {
	out, err := exec.Command("docker", "version", "-f", "{{.Server.Version}} (API {{.Server.APIVersion}})").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
