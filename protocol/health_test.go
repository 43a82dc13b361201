package protocol

import (
	"encoding/json"
	"testing"
	"time"
)

// The worker-side codes are exactly these: what says the worker, not the
// task, failed.
func TestWorkerSideCodes(t *testing.T) {
	want := map[Code]bool{CodeAgentCrashed: true, CodeAgentStalled: true, CodeInternalError: true, CodeOOMKilled: true,
		CodeKilled: true, CodeMCPUnavailable: true, CodeAuthFailed: true}
	for _, c := range Codes {
		if c.WorkerSide() != want[c] {
			t.Errorf("%s: WorkerSide = %v, want %v", c, c.WorkerSide(), want[c])
		}
	}
	if Code("").WorkerSide() {
		t.Error("no code is worker-side")
	}
}

func TestHealthStartsUnknown(t *testing.T) {
	m := NewWorkerMachine("w", time.Unix(0, 0))
	if m.Health != HealthUnknown || !m.Health.Valid() || Health("sick").Valid() {
		t.Fatalf("health %q", m.Health)
	}
}

// Three worker-side failures in a row degrade; a task-side failure or a
// success between resets the count; a refusal before the agent ran
// counts for nothing.
func TestTaskEndedDegradesAfterThreeWorkerSideFailures(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewWorkerMachine("w", t0)
	_, _ = m.Transition(WorkerIdle, "started", t0)
	_, _, _ = m.SetHealth(HealthHealthy, "first heartbeat", t0)
	seq := []struct {
		code Code
		ran  bool
	}{
		{CodeAgentCrashed, true}, {CodeAgentStalled, true}, {CodeTaskFailed, true}, // reset
		{CodeInternalError, false}, {CodeBudgetExceeded, false}, {CodeAgentCrashed, true}, // the refusal counts for nothing
	}
	for i, s := range seq {
		if _, changed := m.TaskEnded(s.code, s.ran, t0.Add(time.Duration(i)*time.Second)); changed {
			t.Fatalf("step %d (%s) changed the health", i, s.code)
		}
	}
	tr, changed := m.TaskEnded(CodeOOMKilled, true, t0.Add(10*time.Second))
	if !changed || m.Health != HealthDegraded || tr.FromHealth != HealthHealthy || tr.ToHealth != HealthDegraded || tr.Reason == "" {
		t.Fatalf("third failure in a row: changed %v, health %s, %+v", changed, m.Health, tr)
	}
	if _, changed := m.TaskEnded(CodeAgentCrashed, true, t0.Add(11*time.Second)); changed {
		t.Error("a degraded worker's failure changed its health again")
	}
	// A task that succeeded (on its own input) is a health check passed.
	if tr, changed := m.TaskEnded("", true, t0.Add(20*time.Second)); !changed || m.Health != HealthHealthy || tr.InPrevious != 10*time.Second {
		t.Fatalf("success: changed %v, health %s, %+v", changed, m.Health, tr)
	}
	if m.Streak != (FailureStreak{}) {
		t.Errorf("a success leaves the streak %+v", m.Streak)
	}
}

// A degraded worker's health check is due after its cool-down, doubled
// for each degradation in a row; a worker back from it is on probation.
func TestHealthCheckCooldownAndProbation(t *testing.T) {
	t0 := time.Unix(1000, 0)
	base := 10 * time.Second
	m := NewWorkerMachine("w", t0)
	_, _ = m.Transition(WorkerIdle, "started", t0)
	for i := 0; i < DegradeAfterFailures; i++ {
		m.TaskEnded(CodeAgentCrashed, true, t0)
	}
	if m.Health != HealthDegraded {
		t.Fatal("not degraded")
	}
	if m.HealthCheckDue(base, t0.Add(base-time.Millisecond)) || !m.HealthCheckDue(base, t0.Add(base)) {
		t.Error("first cool-down is not the base")
	}
	if _, ok := m.HealthCheckPassed("round trip", t0.Add(base)); !ok || m.Health != HealthHealthy {
		t.Fatal("health check did not restore")
	}
	// Probation: one more worker-side failure degrades again, and the
	// cool-down doubles.
	t1 := t0.Add(time.Minute)
	if _, changed := m.TaskEnded(CodeAgentCrashed, true, t1); !changed || m.Health != HealthDegraded {
		t.Fatal("a failure on probation did not degrade")
	}
	if m.HealthCheckDue(base, t1.Add(2*base-time.Millisecond)) || !m.HealthCheckDue(base, t1.Add(2*base)) {
		t.Error("second cool-down is not twice the base")
	}
	if got := (FailureStreak{Degradations: 30}).Cooldown(base); got != MaxHealthCooldown {
		t.Errorf("cool-down unbounded: %v", got)
	}
	if _, ok := NewWorkerMachine("x", t0).HealthCheckPassed("x", t0); ok {
		t.Error("a worker that is not degraded passed a health check")
	}
}

func TestTransitionRecordRoundTrip(t *testing.T) {
	tr := WorkerTransition{From: WorkerIdle, To: WorkerBusy, FromHealth: HealthHealthy, ToHealth: HealthHealthy,
		Reason: "task r1", At: time.Unix(5, 0), InPrevious: 1500 * time.Millisecond}
	doc, err := json.Marshal(tr.Record())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTransitionRecord(doc)
	if err != nil || got.InPreviousMS != 1500 || got.From != WorkerIdle || got.To != WorkerBusy || got.Reason != "task r1" {
		t.Fatalf("%+v %v", got, err)
	}
	if d := got.Detail(); d["from"] != "idle" || d["to"] != "busy" || d["in_previous_ms"] != int64(1500) {
		t.Errorf("detail %v", d)
	}
	if _, err := DecodeTransitionRecord([]byte(`{"from":"x","to":"idle"}`)); err == nil {
		t.Error("unknown state accepted")
	}
}
