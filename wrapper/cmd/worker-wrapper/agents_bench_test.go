package main

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// realAgents are the agent types with a CLI of their own, each installed
// by `make setup`.
var realAgents = []protocol.AgentType{protocol.AgentClaude, protocol.AgentDroid, protocol.AgentCodex, protocol.AgentOpenCode, protocol.AgentQwen}

// stubModelEnv points the real CLI of agentType, through the wrapper's
// proxy, at the stub model at url, with key as the model API key.
// Claude and OpenCode call its Messages API, Droid too through its own
// setting; Codex its Responses API and Qwen Code its Chat Completions,
// asking for a model the stub prices nowhere but answers under. A model
// Codex has no metadata for gets its classic function tools, which the
// stub's scripts drive (its own models get code mode's JavaScript tool).
func stubModelEnv(agentType protocol.AgentType, url, key string) []string {
	switch agentType {
	case protocol.AgentDroid:
		return []string{"DROID_BASE_URL=" + url}
	case protocol.AgentCodex, protocol.AgentQwen:
		return []string{"OPENAI_BASE_URL=" + url + "/v1", "OPENAI_API_KEY=" + key, "AGENT_MODEL=gpt-stub"}
	}
	return []string{"ANTHROPIC_BASE_URL=" + url}
}

// Task counts of BenchmarkAgents, per agent.
const (
	agentsPerTaskTasks    = 20 // on the worker running a process per task
	agentsFreshWorkers    = 3  // first tasks: that worker's and two more's
	agentsPersistentTasks = 8  // on the worker with AGENT_PERSISTENT
	agentsBareStarts      = 10 // `<cli> --version`, for a baseline
)

// BenchmarkAgents runs every real agent CLI through the wrapper binary
// against the stub model, one agent after another in one run, each model
// call answered at once with a stop output. For each agent it reports:
//
//   - task XADD → agent start, the wrapper's task_started event (its
//     clock once the agent's process runs), over the tasks of one project
//     on a worker running a process per task, p50 and max (a bound on the
//     p99); baseline: a Redis hop and a bare start of the same CLI;
//   - the first task of a fresh worker, XADD → Output stored (one model
//     call), median of fresh workers; baseline: the agent's run in it, as
//     the wrapper times it (the Output's duration_ms);
//   - a follow-up in the project's session, XADD → Output, median of
//     the tasks after the first, on a process per task and on the
//     persistent process (AGENT_PERSISTENT: Claude's stream-json, Droid's
//     JSON-RPC mode, `codex app-server`, one ACP process for OpenCode and
//     Qwen Code), and their ratio.
func BenchmarkAgents(b *testing.B) {
	for _, agentType := range realAgents {
		b.Run(string(agentType), func(b *testing.B) { benchAgent(b, agentType) })
	}
}

// benchAgent is BenchmarkAgents for one agent type.
func benchAgent(b *testing.B, agentType protocol.AgentType) {
	bin := realCLI(b, agentType)
	stub := completingStub(b)
	agentEnv := append([]string{"AGENT_TYPE=" + string(agentType), "AGENT_BIN=" + bin}, stubModelEnv(agentType, stub.URL, "sk-stub")...)
	name := string(agentType) + "-"

	// A process per task: the tasks of one project, then the first tasks
	// of more fresh workers.
	w := startAgentWorker(b, agentEnv, false)
	var toStart, firsts, firstRuns, perTask []float64
	for i := 0; i < agentsPerTaskTasks; i++ {
		calls := len(stub.Requests())
		t := w.task()
		toStart = append(toStart, t.toStart)
		if i == 0 {
			firsts, firstRuns = append(firsts, t.toOutput), append(firstRuns, t.agentRun)
			b.Logf("%s: %d model calls in the first task", agentType, len(stub.Requests())-calls)
		} else {
			perTask = append(perTask, t.toOutput)
		}
	}
	hops := redisHops(w.rc, agentsPerTaskTasks)
	w.stop()
	for i := 1; i < agentsFreshWorkers; i++ {
		w := startAgentWorker(b, agentEnv, false)
		t := w.task()
		firsts, firstRuns = append(firsts, t.toOutput), append(firstRuns, t.agentRun)
		w.stop()
	}

	// The persistent process: the first task starts it.
	w = startAgentWorker(b, agentEnv, true)
	var persistent []float64
	for i := 0; i < agentsPersistentTasks; i++ {
		if t := w.task(); i > 0 {
			persistent = append(persistent, t.toOutput)
		}
	}
	w.stop()
	if other := stub.OtherRequests(); len(other) > 0 {
		b.Logf("%s: requests the stub does not serve: %q", agentType, other)
	}

	bareStart := bareStarts(b, bin, agentsBareStarts)
	b.Logf("%s: task XADD → agent start, ms: %s", agentType, sortedMS(toStart))
	// The p99 metrics are maxes: of 20, a bound on the p99.
	b.ReportMetric(percentile(toStart, 0.5), name+"xadd-to-agent-start-p50-ms")
	b.ReportMetric(percentile(toStart, 1), name+"xadd-to-agent-start-p99-ms")
	b.ReportMetric(percentile(hops, 0.5), name+"baseline-redis-hop-p50-ms")
	b.ReportMetric(percentile(hops, 1), name+"baseline-redis-hop-p99-ms")
	b.ReportMetric(percentile(bareStart, 0.5), name+"baseline-bare-start-p50-ms")
	b.ReportMetric(percentile(bareStart, 1), name+"baseline-bare-start-p99-ms")
	b.ReportMetric(percentile(firsts, 0.5), name+"first-task-median-ms")
	b.ReportMetric(percentile(firstRuns, 0.5), name+"first-task-agent-run-median-ms")
	p, t := percentile(persistent, 0.5), percentile(perTask, 0.5)
	b.ReportMetric(t, name+"follow-up-per-task-median-ms")
	b.ReportMetric(p, name+"follow-up-persistent-median-ms")
	b.ReportMetric(p/t, name+"persistent-to-per-task-ratio")
}

// agentWorker is a wrapper binary with a Redis of its own, given the tasks
// of one project one at a time.
type agentWorker struct {
	b    *testing.B
	rc   *redis.Client
	cmd  *exec.Cmd
	log  *strings.Builder // the wrapper's output
	last string           // the output stream's last entry read
	sent int              // tasks sent
}

// startAgentWorker starts the wrapper with agentEnv (the agent and its
// model), a process per task or persistent.
func startAgentWorker(b *testing.B, agentEnv []string, persistent bool) *agentWorker {
	r, rc := testkit.StartRedisClient(b)
	b.Cleanup(func() { rc.Close() })
	env := append([]string{"HOME=" + b.TempDir(), "PATH=/usr/local/bin:/usr/bin:/bin", "ANTHROPIC_API_KEY=x", "WORKER_ID=bb-1",
		"REDIS_URL=" + r.URL(), "WORKSPACE=" + b.TempDir(), "PAUSE_AFTER_OUTPUT=false", "AGENT_PERSISTENT=" + strconv.FormatBool(persistent)},
		agentEnv...)
	cmd, log := startWrapper(b, env)
	// The stream is new: "$" could miss an output written before the
	// first XREAD.
	w := &agentWorker{b: b, rc: rc, cmd: cmd, log: log, last: "0-0"}
	// A task comes once the worker is up, as the spawner gives it one.
	testkit.Eventually(b, "the wrapper's started event", 30*time.Second, func() bool {
		return !w.eventAt(protocol.EventStarted, "").IsZero()
	})
	return w
}

// taskTimes are a task's times, in ms.
type taskTimes struct {
	toOutput float64 // from the task's XADD to its Output readable
	toStart  float64 // from the task's XADD to its task_started event's time
	agentRun float64 // the agent's run, as the wrapper timed it (duration_ms)
}

// task gives the worker its next task and waits for its Output, complete.
func (w *agentWorker) task() (t taskTimes) {
	b, keys, ctx := w.b, protocol.Keys{}, context.Background()
	id := "t-" + strconv.Itoa(w.sent)
	w.sent++
	t0 := time.Now()
	sendTask(b, w.rc, keys.Input("bb-1"), protocol.Task{RequestID: id, ProjectID: "bench", Prompt: "next step"})
	for done := false; !done; {
		res, err := w.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{keys.Output("bb-1"), w.last}, Block: 2 * time.Minute}).Result()
		if err != nil {
			b.Fatalf("task %s: no output: %v\n%s", id, err, w.log)
		}
		for _, m := range res[0].Messages {
			w.last = m.ID
			data, _ := protocol.EntryData(m.Values)
			if _, typ, _ := protocol.PeekType(data); typ != protocol.TypeOutput {
				continue
			}
			t.toOutput, done = float64(time.Since(t0).Microseconds())/1000, true
			o, err := protocol.DecodeOutput(data)
			if err != nil || o.RequestID != id || o.Status != protocol.StatusComplete {
				b.Fatalf("task %s: output %s (%v)\n%s", id, data, err, w.log)
			}
			t.agentRun = float64(o.DurationMS)
		}
	}
	// Events are published apart from the output: the event may come
	// just after it.
	var started time.Time
	testkit.Eventually(b, "task "+id+"'s task_started event", 5*time.Second, func() bool {
		started = w.eventAt(protocol.EventTaskStarted, id)
		return !started.IsZero()
	})
	t.toStart = float64(started.Sub(t0).Microseconds()) / 1000
	return t
}

// eventAt is the time of the first lifecycle event ev of requestID; zero
// when there is none yet.
func (w *agentWorker) eventAt(ev protocol.Event, requestID string) time.Time {
	msgs, _ := w.rc.XRange(context.Background(), protocol.Keys{}.Lifecycle(), "-", "+").Result()
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if l, err := protocol.DecodeLifecycle(data); err == nil && l.Event == ev && l.RequestID == requestID {
			return l.Timestamp
		}
	}
	return time.Time{}
}

// stop ends the wrapper as its manager does, SIGTERM, so that it stops
// its agent too before the next worker runs.
func (w *agentWorker) stop() {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		w.b.Fatalf("the wrapper did not stop 30 s after SIGTERM:\n%s", w.log)
	}
}

// bareStarts starts `bin --version` n times, one at a time: the time (ms)
// its exec takes to return, the moment the task_started event marks.
func bareStarts(b *testing.B, bin string, n int) []float64 {
	home := b.TempDir()
	var ms []float64
	for i := 0; i < n; i++ {
		cmd := exec.Command(bin, "--version")
		cmd.Env, cmd.Dir = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin"}, home
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
		if err := cmd.Wait(); err != nil {
			b.Fatalf("%s --version: %v", bin, err)
		}
	}
	return ms
}

// sortedMS lists ms sorted, to a tenth of a ms: the spread behind a p50
// and a max.
func sortedMS(ms []float64) string {
	s := slices.Clone(ms)
	slices.Sort(s)
	var out []string
	for _, v := range s {
		out = append(out, strconv.FormatFloat(v, 'f', 1, 64))
	}
	return strings.Join(out, " ")
}
