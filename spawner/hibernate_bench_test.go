package spawner

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// hibWorker is a worker of BenchmarkHibernation: its project, and what
// names its keys (its id, its project, its sessions).
type hibWorker struct {
	id, project string
	sessions    []string
}

// tokens are the strings that make a key one of the worker's.
func (w *hibWorker) tokens() []string { return append([]string{w.id, w.project}, w.sessions...) }

// redisBytesOf sums MEMORY USAGE (every element counted) over each
// worker's keys: those of the fixture's prefix whose name holds its id,
// its project (its status, streams, heartbeat, session record and
// session store blob, runs, usage) or one of its session ids. Keys that
// all workers share (the lifecycle stream, the sets) are not counted.
func redisBytesOf(b *testing.B, f *fixture, workers []*hibWorker) map[string]int64 {
	b.Helper()
	ctx := context.Background()
	keys, err := f.rc.Keys(ctx, f.keys.Prefix+":*").Result()
	if err != nil {
		b.Fatal(err)
	}
	sum := map[string]int64{}
	for _, k := range keys {
		var owner *hibWorker
		for _, w := range workers {
			if slices.ContainsFunc(w.tokens(), func(t string) bool { return strings.Contains(k, t) }) {
				owner = w
				break
			}
		}
		if owner == nil {
			continue
		}
		n, err := f.rc.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			b.Fatalf("MEMORY USAGE %s: %v", k, err)
		}
		sum[owner.id] += n
	}
	return sum
}

// hibernateNow hibernates an idle worker and waits until its container
// is gone.
func (f *fixture) hibernateNow(b *testing.B, id string) {
	b.Helper()
	idle(b, f, id)
	if err := f.s.Hibernate(context.Background(), id); err != nil {
		b.Fatalf("hibernate %s: %v", id, err)
	}
	waitHibernated(b, f, id, time.Minute)
}

// BenchmarkHibernation, with the real claude against the stub model:
//
//   - wake from hibernation: a task XADDed to a hibernated worker's input
//     → its task_started event (a new container, the wrapper, the agent
//     resuming the session), against a cold create + first task (create →
//     the first task's task_started) of the same run, one of each per
//     round. A wake on its host keeps the project volume; a wake whose
//     project volume was removed (as on another host) restores the
//     session from the session store. Each woken worker's task resumes its
//     session: the output says resume and the stub model sees the
//     earlier turn (a code word only the first task's prompt held).
//   - HIB_WORKERS (default 100) hibernated workers, each of which ran a
//     task: the Redis bytes of each one's keys (its session store blob
//     included), against the same keys while it was awake and idle, and
//     the containers left (0).
//
// A wake here makes a container as a create does: no pool has these
// workers' specs (BenchmarkWakeFromPool measures the wake a warm pool
// backs).
func BenchmarkHibernation(b *testing.B) {
	const rounds = 12
	total := 100
	if v, err := strconv.Atoi(getenvDefault("HIB_WORKERS", "")); err == nil && v >= rounds {
		total = v
	}
	f := newFixture(b, func(c *Config) { c.IdleTimeout = time.Hour })
	f.startManager(b)
	ctx := context.Background()
	if _, err := f.s.inst.images.EnsureImage(ctx, protocol.AgentClaude, nil); err != nil {
		b.Fatal(err)
	}
	usedBefore := usedMemory(b, f.rc)
	var workers []*hibWorker
	awake := map[string]int64{}
	create := func(i int) *hibWorker {
		w := &hibWorker{project: fmt.Sprintf("hib%03d", i)}
		info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: w.project})
		if err != nil {
			b.Fatal(err)
		}
		w.id = info.WorkerID
		workers = append(workers, w)
		return w
	}
	codeWord := func(w *hibWorker) string { return "pelican-" + w.project }
	first := func(w *hibWorker) {
		f.send(b, f.keys.Input(w.id), protocol.Task{RequestID: w.project + "-r1", ProjectID: w.project, Prompt: "remember the code word " + codeWord(w)})
	}
	done := func(w *hibWorker, req string) protocol.Output {
		o := f.waitOutput(b, f.keys.Output(w.id), req, 2*time.Minute)
		if o.Status != protocol.StatusComplete {
			b.Fatalf("%s: %+v %+v", req, o, o.Error)
		}
		if !slices.Contains(w.sessions, o.SessionID) {
			w.sessions = append(w.sessions, o.SessionID)
		}
		return o
	}
	// wake sends a task to a hibernated worker, and returns the time from
	// the XADD to its task_started and whether the session id stayed; the
	// time to its container started (the created event) goes to made.
	wake := func(w *hibWorker, req string, made *[]float64) (float64, bool) {
		sid := w.sessions[len(w.sessions)-1]
		// Hibernation pauses the worker, then retires its container: the
		// wake loop, seeing a paused worker being retired (busy: ending),
		// leaves it alone for wakeBackoff, a hibernated worker included.
		// A task comes to a hibernated worker long after that; so does
		// this one.
		time.Sleep(wakeBackoff + 200*time.Millisecond)
		f.stub.Reset()
		from := lastID(f.rc, f.keys.Lifecycle())
		t0 := time.Now()
		f.send(b, f.keys.Input(w.id), protocol.Task{RequestID: req, ProjectID: w.project, Prompt: "what was the code word?"})
		at := f.waitEvents(b, from, w.id, 2*time.Minute, protocol.EventCreated, protocol.EventTaskStarted)
		*made = append(*made, ms(at[protocol.EventCreated].Sub(t0)))
		o := done(w, req)
		if o.Session == nil || o.Session.Action != protocol.SessionResume || o.Session.ResumeError != nil {
			b.Fatalf("%s did not resume its session: %+v", req, o.Session)
		}
		seen := false
		for _, r := range f.stub.Requests() {
			seen = seen || strings.Contains(r.Text(), codeWord(w))
		}
		if !seen {
			b.Fatalf("%s: the model did not see the earlier turn", req)
		}
		return ms(at[protocol.EventTaskStarted].Sub(t0)), o.SessionID == sid
	}

	var cold, wakeHost, wakeStore, madeHost, madeStore []float64
	kept := 0
	for i := 0; i < rounds; i++ {
		from := lastID(f.rc, f.keys.Lifecycle())
		t0 := time.Now()
		w := create(i)
		first(w)
		at := f.waitEvent(b, from, w.id, protocol.EventTaskStarted, 2*time.Minute)
		cold = append(cold, ms(at.Sub(t0)))
		done(w, w.project+"-r1")

		f.hibernateNow(b, w.id)
		took, same := wake(w, w.project+"-r2", &madeHost)
		wakeHost = append(wakeHost, took)
		kept += btoi(same)

		f.hibernateNow(b, w.id)
		vol := ProjectVolume(f.keys.Prefix, protocol.AgentClaude, w.project)
		if out, err := exec.Command("docker", "volume", "rm", vol).CombinedOutput(); err != nil {
			b.Fatalf("docker volume rm %s: %v %s", vol, err, out)
		}
		took, same = wake(w, w.project+"-r3", &madeStore)
		wakeStore = append(wakeStore, took)
		kept += btoi(same)

		idle(b, f, w.id)
		awake[w.id] = redisBytesOf(b, f, []*hibWorker{w})[w.id]
		f.hibernateNow(b, w.id)
	}

	// The rest, a batch of MAX_CONCURRENT_WORKERS at a time: made, a
	// task each, then hibernated.
	start := time.Now()
	batch := f.s.cfg.MaxWorkers
	for n := rounds; n < total; n += batch {
		var ws []*hibWorker
		for i := n; i < min(total, n+batch); i++ {
			w := create(i)
			first(w)
			ws = append(ws, w)
		}
		for _, w := range ws {
			done(w, w.project+"-r1")
			idle(b, f, w.id)
		}
		for id, n := range redisBytesOf(b, f, ws) {
			awake[id] = n
		}
		for _, w := range ws {
			f.hibernateNow(b, w.id)
		}
	}
	b.Logf("%d workers made, each given a task and hibernated, in %v (the 12 timed rounds before: 3 containers each)", total-rounds, time.Since(start).Round(time.Second))

	left := workerContainersOf(b, f)
	hib := redisBytesOf(b, f, workers)
	var hibBytes, awakeBytes []float64
	for _, w := range workers {
		if hib[w.id] == 0 || awake[w.id] == 0 {
			b.Fatalf("no keys counted for %s (%d hibernated, %d awake)", w.id, hib[w.id], awake[w.id])
		}
		hibBytes, awakeBytes = append(hibBytes, float64(hib[w.id])), append(awakeBytes, float64(awake[w.id]))
	}
	blobs := 0.0
	for _, w := range workers {
		n, err := f.rc.MemoryUsage(ctx, f.keys.SessionFiles(protocol.AgentClaude, w.project), 0).Result()
		if err != nil {
			b.Fatalf("no session store blob of %s: %v", w.project, err)
		}
		blobs += float64(n)
	}
	for _, x := range []struct {
		name string
		ms   []float64
	}{{"cold create + first task", cold}, {"wake", wakeHost}, {"wake, session from the store", wakeStore}} {
		b.Logf("%s, ms: %v", x.name, sorted(x.ms))
	}
	b.ReportMetric(median(cold), "hib-cold-create-first-task-p50-ms")
	b.ReportMetric(slices.Max(cold), "hib-cold-create-first-task-max-ms")
	b.ReportMetric(median(wakeHost), "hib-wake-p50-ms")
	b.ReportMetric(slices.Max(wakeHost), "hib-wake-max-ms")
	b.ReportMetric(median(madeHost), "hib-wake-container-started-p50-ms")
	b.ReportMetric(median(madeStore), "hib-wake-store-container-started-p50-ms")
	b.ReportMetric(median(wakeStore), "hib-wake-store-p50-ms")
	b.ReportMetric(slices.Max(wakeStore), "hib-wake-store-max-ms")
	b.ReportMetric(float64(kept)/float64(2*rounds), "hib-wake-session-id-kept-fraction")
	b.ReportMetric(float64(len(workers)), "hib-workers")
	b.ReportMetric(float64(len(left)), "hib-containers-left")
	b.ReportMetric(mean(hibBytes), "hib-redis-bytes-per-worker")
	b.ReportMetric(mean(awakeBytes), "hib-awake-redis-bytes-per-worker")
	b.ReportMetric(blobs/float64(len(workers)), "hib-session-blob-bytes-per-worker")
	b.ReportMetric((usedMemory(b, f.rc)-usedBefore)/float64(len(workers)), "hib-redis-used-memory-per-worker-bytes")
}

// sorted returns xs sorted, each rounded to the ms.
func sorted(xs []float64) []float64 {
	s := make([]float64, len(xs))
	for i, x := range xs {
		s[i] = math.Round(x)
	}
	slices.Sort(s)
	return s
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
