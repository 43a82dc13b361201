package spawner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// The scale benchmarks run workers whose agent is the wrapper's fake agent
// (a Go program that prints Claude's stream-json without a model), so
// that what is measured is the runtime, not the CLI.
// Its tag is the worker base's with "-bench" (agentvisor/worker-base-bench
// by default): a checkout with a WORKER_BASE_IMAGE of its own has a bench
// image of its own too.
var benchBase = benchTag(os.Getenv("WORKER_BASE_IMAGE"))

func benchTag(base string) string {
	if base == "" {
		base = "agentvisor/worker-base:latest"
	}
	repo, tag := base, "latest"
	if i := strings.LastIndex(base, ":"); i > strings.LastIndex(base, "/") {
		repo, tag = base[:i], base[i+1:]
	}
	return repo + "-bench:" + tag
}

var (
	benchBaseOnce sync.Once
	benchBaseErr  error
)

// buildBenchBase builds worker-base plus the fake agent, once per test
// binary.
func buildBenchBase(b testing.TB) {
	b.Helper()
	testkit.WorkerImages(b)
	benchBaseOnce.Do(func() { benchBaseErr = testkit.BuildFakeAgentImage(benchBase, "worker-base-bench") })
	if benchBaseErr != nil {
		b.Fatal(benchBaseErr)
	}
}

// fakeSpec is a worker of a fixture that uses the fake agent (useFakeAgent).
var fakeSpec = protocol.WorkerSpec{AgentType: protocol.AgentClaude}

// useFakeAgent makes a fixture's workers run the fake agent: the bench
// base image has it, and the manager's operator-owned worker environment
// (WORKER_ENV) points AGENT_BIN at it (a spec may not set AGENT_BIN).
func useFakeAgent(c *Config) {
	c.BaseImage = benchBase
	c.WorkerEnv = map[string]string{"AGENT_BIN": testkit.FakeAgentBin}
}

// cgroupMemory is a container's memory use as its cgroup counts it.
func cgroupMemory(b *testing.B, containerID string) float64 {
	data, err := os.ReadFile("/sys/fs/cgroup/memory/docker/" + containerID + "/memory.usage_in_bytes")
	if err != nil {
		data, err = os.ReadFile("/sys/fs/cgroup/system.slice/docker-" + containerID + ".scope/memory.current")
	}
	if err != nil {
		b.Fatalf("memory of %s: %v", containerID, err)
	}
	n, _ := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
	return n
}

// BenchmarkScaleHundred starts 100 workers at once on this machine, then
// gives each a task at the same moment: memory per worker (vs a bare
// container of the same image), the oldest heartbeat seen (vs the
// interval), and the p99 of task XADD ->
// Output (vs the same task on one worker alone).
func BenchmarkScaleHundred(b *testing.B) {
	const n = 100
	buildBenchBase(b)
	f := newFixture(b, func(c *Config) {
		c.MaxWorkers, c.HeartbeatInterval, c.IdleTimeout = n, 2*time.Second, time.Hour
		useFakeAgent(c)
	})
	ctx := context.Background()
	opt, _ := redis.ParseURL(f.s.cfg.RedisURL)
	opt.PoolSize = 2*n + 10 // a blocked read per worker at once
	rc := redis.NewClient(opt)
	defer rc.Close()
	if _, err := f.s.inst.images.EnsureImage(ctx, fakeSpec.AgentType, nil); err != nil {
		b.Fatal(err)
	}

	start := time.Now()
	workers := make([]protocol.WorkerInfo, n)
	runConcurrently(b, n, func(i int) error {
		var err error
		workers[i], err = f.s.Create(ctx, fakeSpec)
		return err
	})
	b.ReportMetric(time.Since(start).Seconds(), "start-100-s")
	defer func() {
		t0 := time.Now()
		f.s.Shutdown(context.Background())
		b.Logf("100 workers shut down in %v", time.Since(t0))
	}()
	time.Sleep(4 * time.Second) // every wrapper up and beating

	// task runs the fake agent once on worker w and returns XADD -> Output.
	task := func(w protocol.WorkerInfo, req string) (time.Duration, error) {
		out := f.keys.Output(w.WorkerID)
		last := lastID(rc, out)
		doc, _ := protocol.Task{RequestID: req, Prompt: "fake:stamp"}.Encode()
		t0 := time.Now()
		if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Input(w.WorkerID), Values: protocol.Values(doc)}).Err(); err != nil {
			return 0, err
		}
		for {
			res, err := rc.XRead(ctx, &redis.XReadArgs{Streams: []string{out, last}, Block: time.Minute}).Result()
			if err != nil {
				return 0, fmt.Errorf("worker %s: %w", w.WorkerID, err)
			}
			for _, m := range res[0].Messages {
				last = m.ID
				data, _ := protocol.EntryData(m.Values)
				if o, err := protocol.DecodeOutput(data); err == nil && o.RequestID == req {
					if o.Status != protocol.StatusComplete {
						return 0, fmt.Errorf("task %s: %s %+v", req, o.Status, o.Error)
					}
					return time.Since(t0), nil
				}
			}
		}
	}

	// Baseline: the same task on one worker, alone, ten times.
	var single []float64
	for i := 0; i < 10; i++ {
		d, err := task(workers[0], fmt.Sprintf("single-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		single = append(single, float64(d.Microseconds())/1000)
	}

	// Heartbeat lag, sampled while the 100 tasks run and after.
	var lag float64 // the oldest heartbeat seen: beyond one interval, a worker beat late
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			for _, w := range workers {
				doc, err := f.rc.Get(ctx, f.keys.Heartbeat(w.WorkerID)).Bytes()
				if err != nil {
					continue // the wrapper asked to be paused: no manager here pauses it
				}
				hb, _ := protocol.DecodeHeartbeat(doc)
				if age := time.Since(hb.Timestamp).Seconds(); age > lag {
					lag = age
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	lat := make([]float64, n)
	runConcurrently(b, n, func(i int) error {
		d, err := task(workers[i], fmt.Sprintf("burst-%d", i))
		lat[i] = float64(d.Microseconds()) / 1000
		return err
	})
	time.Sleep(6 * time.Second)
	close(stop)
	<-sampled

	var total float64
	for _, w := range workers {
		total += cgroupMemory(b, w.ContainerID)
	}
	// Baseline: a bare container of the same image, its fake agent idle.
	bare := fmt.Sprintf("bench-bare-mem-%d", time.Now().UnixNano())
	if out, err := exec.Command("docker", "run", "-d", "--name", bare, "--network", "host", "--entrypoint", "/usr/local/bin/fake-agent",
		workers[0].Image, "sleep-ms", "60000").CombinedOutput(); err != nil {
		b.Fatalf("bare container: %v %s", err, out)
	}
	defer exec.Command("docker", "rm", "-f", bare).Run()
	time.Sleep(2 * time.Second)
	id, _ := exec.Command("docker", "inspect", "-f", "{{.Id}}", bare).Output()
	bareMem := cgroupMemory(b, strings.TrimSpace(string(id)))

	b.ReportMetric(total/n/1e6, "memory-per-worker-MB")
	b.ReportMetric(bareMem/1e6, "bare-container-memory-MB")
	b.ReportMetric(lag*1000, "heartbeat-age-max-ms")
	b.ReportMetric(float64(f.s.cfg.HeartbeatInterval.Milliseconds()), "heartbeat-interval-ms")
	b.ReportMetric(p99(lat), "task-100-concurrent-p99-ms")
	b.ReportMetric(median(single), "task-single-median-ms")
}

// BenchmarkShutdownTwenty: the manager's shutdown of 20 workers (time,
// containers left), against `docker rm -f` of 20 bare containers of the
// same image (no graceful stop: the floor of removing 20 containers).
func BenchmarkShutdownTwenty(b *testing.B) {
	const n = 20
	buildBenchBase(b)
	f := newFixture(b, func(c *Config) { c.MaxWorkers = n; useFakeAgent(c) })
	ctx := context.Background()
	workers := make([]protocol.WorkerInfo, n)
	runConcurrently(b, n, func(i int) error {
		var err error
		workers[i], err = f.s.Create(ctx, fakeSpec)
		return err
	})
	time.Sleep(2 * time.Second)
	t0 := time.Now()
	if err := f.s.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(t0)
	left := testkit.CountLabelled(testkit.KeyPrefixLabel(f.keys.Prefix))

	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("bench-bare-stop-%d-%d", time.Now().UnixNano(), i)
		if out, err := exec.Command("docker", "run", "-d", "--name", name, "--network", "host", "--entrypoint", "/usr/local/bin/fake-agent",
			workers[0].Image, "sleep-ms", "60000").CombinedOutput(); err != nil {
			b.Fatalf("bare container: %v %s", err, out)
		}
		names = append(names, name)
		b.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	}
	t0 = time.Now()
	if out, err := exec.Command("docker", append([]string{"rm", "-f"}, names...)...).CombinedOutput(); err != nil {
		b.Fatalf("docker rm: %v %s", err, out)
	}
	bare := time.Since(t0)
	b.ReportMetric(took.Seconds(), "shutdown-20-s")
	b.ReportMetric(float64(left), "containers-left")
	b.ReportMetric(bare.Seconds(), "bare-docker-rm-20-s")
}
