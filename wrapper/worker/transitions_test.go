package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// stateChanges returns the worker's state_changed events' transitions.
func (e *env) stateChanges(workerID string) []protocol.TransitionRecord {
	var out []protocol.TransitionRecord
	for _, l := range e.lifecycleEvents() {
		if l.Event != protocol.EventStateChanged || l.WorkerID != workerID {
			continue
		}
		d := l.Detail
		str := func(k string) string { v, _ := d[k].(string); return v }
		ms, _ := d["in_previous_ms"].(float64)
		out = append(out, protocol.TransitionRecord{From: protocol.WorkerState(str("from")), To: protocol.WorkerState(str("to")),
			FromHealth: protocol.Health(str("from_health")), ToHealth: protocol.Health(str("to_health")), Reason: str("reason"), InPreviousMS: int64(ms)})
	}
	return out
}

func transitionsText(trs []protocol.TransitionRecord) string {
	var parts []string
	for _, t := range trs {
		s := string(t.From) + ">" + string(t.To)
		if t.FromHealth != t.ToHealth {
			s = string(t.FromHealth) + ">" + string(t.ToHealth)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}

// statusField reads one field of a worker's status hash.
func (e *env) statusField(workerID, field string) string {
	v, _ := e.rc.HGet(context.Background(), e.keys.Status(workerID), field).Result()
	return v
}

// Every transition is published (state_changed, with the time spent in
// the state left) and kept in the worker's capped history; health starts
// unknown and is healthy from the first heartbeat.
func TestTransitionsArePublishedAndKept(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	ctx := context.Background()
	id := e.cfg.WorkerID
	testkit.Eventually(t, "healthy after the first heartbeat", 5*time.Second, func() bool {
		return e.statusField(id, protocol.StatusFieldHealth) == string(protocol.HealthHealthy)
	})
	e.send(e.keys.Input(id), protocol.Task{RequestID: "t1", Prompt: "fake:sleep-150"})
	e.waitOutputs(e.keys.Output(id), 1, 15*time.Second)
	e.pubFlushed()
	trs := e.stateChanges(id)
	text := transitionsText(trs)
	// The first heartbeat may come before or after the start.
	if text != "starting>idle,unknown>healthy,idle>busy,busy>idle" && text != "unknown>healthy,starting>idle,idle>busy,busy>idle" {
		t.Fatalf("transitions %s", text)
	}
	busy := trs[3]
	if busy.InPreviousMS < 150 || busy.Reason != "task t1 complete" {
		t.Errorf("busy>idle %+v: want at least the task's 150 ms, and its reason", busy)
	}
	hist, err := e.rc.LRange(ctx, e.keys.StatusHistory(id), 0, -1).Result()
	if err != nil || len(hist) != 4 {
		t.Fatalf("history %v %v", hist, err)
	}
	newest, err := protocol.DecodeTransitionRecord([]byte(hist[0]))
	if err != nil || newest.From != protocol.WorkerBusy || newest.To != protocol.WorkerIdle || newest.InPreviousMS != busy.InPreviousMS {
		t.Errorf("newest history entry %+v %v", newest, err)
	}
	since, err := protocol.ParseTime(e.statusField(id, protocol.StatusFieldStateSince))
	if err != nil || since.IsZero() || time.Since(since) > time.Minute {
		t.Errorf("state_since %v %v", since, err)
	}
	// The history is capped.
	for i := range protocol.MaxStatusHistory {
		e.send(e.keys.Input(id), protocol.Task{RequestID: fmt.Sprintf("c%d", i), Prompt: "quick"})
	}
	e.waitOutputs(e.keys.Output(id), 1+protocol.MaxStatusHistory, 60*time.Second)
	e.pubFlushed()
	if n, _ := e.rc.LLen(ctx, e.keys.StatusHistory(id)).Result(); n != protocol.MaxStatusHistory {
		t.Errorf("history holds %d entries, want %d", n, protocol.MaxStatusHistory)
	}
}

// Three worker-side failures in a row degrade a developer worker: it
// leaves the idle set and reads no new task from the developer queue
// until its health check (a heartbeat round trip after the cool-down)
// passes; then it takes the waiting task.
func TestDegradedDeveloperWorkerStopsTakingSharedTasks(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindDeveloper)
	e.cfg.DegradedCooldown = 2 * time.Second
	e.start()
	ctx := context.Background()
	id, out := e.cfg.WorkerID, e.keys.DeveloperOutput()
	for i := range protocol.DegradeAfterFailures {
		e.send(e.keys.DeveloperInput(), protocol.Task{RequestID: fmt.Sprintf("crash%d", i), Prompt: "fake:crash-after-init"})
		outs := e.waitOutputs(out, i+1, 15*time.Second)
		if o := outs[i]; o.Error == nil || o.Error.Code != protocol.CodeAgentCrashed {
			t.Fatalf("task %d: %+v", i, o)
		}
	}
	testkit.Eventually(t, "degraded", 5*time.Second, func() bool {
		return e.statusField(id, protocol.StatusFieldHealth) == string(protocol.HealthDegraded)
	})
	degradedAt := time.Now()
	if _, err := e.rc.ZScore(ctx, e.keys.DeveloperIdle(), id).Result(); err == nil {
		t.Error("a degraded worker is in the idle set")
	}
	e.send(e.keys.DeveloperInputFor(protocol.PriorityHigh), protocol.Task{RequestID: "after", Prompt: "quick"})
	time.Sleep(time.Second)
	if outs, _ := e.docs(out); len(outs) != protocol.DegradeAfterFailures {
		t.Fatalf("a degraded worker took a task from the queue within its cool-down: %+v", outs[len(outs)-1])
	}
	if g, _ := e.rc.XInfoGroups(ctx, e.keys.DeveloperInputFor(protocol.PriorityHigh)).Result(); len(g) != 1 || g[0].Lag != 1 {
		t.Errorf("the task was read while degraded: %+v", g)
	}
	outs := e.waitOutputs(out, protocol.DegradeAfterFailures+1, 15*time.Second)
	if o := outs[len(outs)-1]; o.RequestID != "after" || o.Status != protocol.StatusComplete {
		t.Fatalf("task after recovery: %+v", o)
	}
	if took := time.Since(degradedAt); took < 1500*time.Millisecond {
		t.Errorf("the task ran %v after the degradation, before the cool-down", took)
	}
	trs := e.stateChanges(id)
	var health []string
	for _, tr := range trs {
		if tr.FromHealth != tr.ToHealth {
			health = append(health, string(tr.ToHealth)+": "+tr.Reason)
		}
	}
	if len(health) != 3 || !strings.HasPrefix(health[1], "degraded: 3 tasks in a row failed") ||
		health[2] != "healthy: health check passed: heartbeat round trip after the cool-down" {
		t.Errorf("health changes %q", health)
	}
}

// A degraded long-lived worker still answers the tasks on its own input;
// one that succeeds makes it healthy again.
func TestDegradedLongLivedWorkerServesItsInput(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.cfg.DegradedCooldown = time.Hour
	e.start()
	id := e.cfg.WorkerID
	for i := range protocol.DegradeAfterFailures {
		e.runTask(protocol.Task{RequestID: fmt.Sprintf("crash%d", i), Prompt: "fake:crash-after-init"})
	}
	testkit.Eventually(t, "degraded", 5*time.Second, func() bool {
		return e.statusField(id, protocol.StatusFieldHealth) == string(protocol.HealthDegraded)
	})
	if o := e.runTask(protocol.Task{RequestID: "ok", Prompt: "quick"}); o.Status != protocol.StatusComplete {
		t.Fatalf("task on a degraded worker's input: %+v", o)
	}
	testkit.Eventually(t, "healthy after a task that succeeded", 5*time.Second, func() bool {
		return e.statusField(id, protocol.StatusFieldHealth) == string(protocol.HealthHealthy)
	})
}
