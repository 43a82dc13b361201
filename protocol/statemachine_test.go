package protocol

import (
	"errors"
	"testing"
	"time"
)

// The allowed transitions, spelt out here independently of the tables in
// statemachine.go: every pair not listed must be refused.
var wantRun = map[string]bool{
	"requested->queued": true, "requested->failed": true,
	"queued->running": true, "queued->failed": true,
	"running->running": true, "running->completed": true, "running->failed": true,
}

var wantWorker = map[string]bool{
	"starting->idle": true, "starting->stopping": true, "starting->failed": true,
	"idle->busy": true, "idle->paused": true, "idle->stopping": true, "idle->failed": true,
	"busy->idle": true, "busy->stopping": true, "busy->failed": true,
	"paused->idle": true, "paused->stopping": true, "paused->failed": true,
	"stopping->stopped": true, "stopping->failed": true,
	// Hibernation: an idle, paused or stopping worker's container goes, its
	// identity stays; a wake makes a new container, a delete ends it.
	"idle->hibernated": true, "paused->hibernated": true, "stopping->hibernated": true,
	"hibernated->starting": true, "hibernated->stopped": true,
}

func TestRunTransitions(t *testing.T) {
	states := append([]RunState{}, RunStates...)
	states = append(states, "bogus")
	for _, from := range states {
		for _, to := range states {
			name := string(from) + "->" + string(to)
			t.Run(name, func(t *testing.T) {
				err := CheckRunTransition(from, to)
				if wantRun[name] && err != nil {
					t.Fatalf("refused an allowed transition: %v", err)
				}
				if !wantRun[name] {
					if err == nil {
						t.Fatal("allowed a refused transition")
					}
					if !errors.Is(err, ErrInvalidTransition) {
						t.Fatalf("error %v does not wrap ErrInvalidTransition", err)
					}
				}
			})
		}
	}
}

func TestRunLifecycle(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := NewRun("r1", "t1", "w1", "p1", t0)
	if r.State != RunRequested {
		t.Fatalf("new run in %s", r.State)
	}
	if err := r.Step("early", t0); err == nil {
		t.Fatal("a step before running was accepted")
	}
	steps := []RunState{RunQueued, RunRunning}
	for i, s := range steps {
		if err := r.Transition(s, t0.Add(time.Duration(i+1)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if !r.StartedAt.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("StartedAt = %v", r.StartedAt)
	}
	for _, name := range []string{"Running tests", "Writing docs"} {
		if err := r.Step(name, t0.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if r.StepsCompleted != 2 || r.CurrentStep != "Writing docs" {
		t.Errorf("steps = %d, current %q", r.StepsCompleted, r.CurrentStep)
	}
	if err := r.Fail(CodeAgentTimeout, "ran past 600 s", t0.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if r.Error != "AGENT_TIMEOUT: ran past 600 s" || !r.FinishedAt.Equal(t0.Add(4*time.Second)) {
		t.Errorf("failed run: error %q finished %v", r.Error, r.FinishedAt)
	}
	before := *r
	for _, s := range RunStates {
		if err := r.Transition(s, t0.Add(time.Hour)); err == nil {
			t.Errorf("terminal run moved to %s", s)
		}
	}
	if err := r.Step("late", t0.Add(time.Hour)); err == nil {
		t.Error("a step after the end was accepted")
	}
	if r.State != before.State || r.UpdatedAt != before.UpdatedAt || r.StepsCompleted != before.StepsCompleted {
		t.Error("a refused transition changed the run")
	}
}

func TestRunHashRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 123, time.UTC)
	r := NewRun("r1", "t1", "w1", "p1", t0)
	_ = r.Transition(RunQueued, t0)
	_ = r.Transition(RunRunning, t0.Add(time.Second))
	_ = r.Step("one", t0.Add(2*time.Second))
	h := map[string]string{}
	for k, v := range r.Hash() {
		h[k] = v.(string)
	}
	got, err := RunFromHash(h)
	if err != nil {
		t.Fatal(err)
	}
	if *got != *r {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *got, *r)
	}
	h[RunFieldStatus] = "bogus"
	if _, err := RunFromHash(h); err == nil {
		t.Fatal("a hash with an unknown state was accepted")
	}
	if _, err := RunFromHash(nil); err == nil {
		t.Fatal("an empty hash was accepted")
	}
}

func TestWorkerTransitions(t *testing.T) {
	states := append([]WorkerState{}, WorkerStates...)
	states = append(states, "bogus")
	for _, from := range states {
		for _, to := range states {
			name := string(from) + "->" + string(to)
			t.Run(name, func(t *testing.T) {
				err := CheckWorkerTransition(from, to)
				if wantWorker[name] && err != nil {
					t.Fatalf("refused an allowed transition: %v", err)
				}
				if !wantWorker[name] && !errors.Is(err, ErrInvalidTransition) {
					t.Fatalf("allowed a refused transition (err %v)", err)
				}
				// The machine agrees with the check.
				m := &WorkerMachine{WorkerID: "w", State: from, Health: HealthHealthy}
				_, merr := m.Transition(to, "test", time.Unix(10, 0))
				if (merr == nil) != (err == nil) {
					t.Fatalf("machine and check disagree: %v vs %v", merr, err)
				}
				if merr != nil && (m.State != from || len(m.History) != 0) {
					t.Fatal("a refused transition changed the machine")
				}
			})
		}
	}
}

func TestWorkerMachineRecordsReasonsAndDurations(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewWorkerMachine("w1", t0)
	steps := []struct {
		to     WorkerState
		reason string
		at     time.Duration
	}{
		{WorkerIdle, "init_complete", 2 * time.Second},
		{WorkerBusy, "task r1", 3 * time.Second},
		{WorkerIdle, "task done", 13 * time.Second},
		{WorkerPaused, "stop output", 14 * time.Second},
	}
	for _, s := range steps {
		if _, err := m.Transition(s.to, s.reason, t0.Add(s.at)); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.History) != 4 {
		t.Fatalf("history has %d entries", len(m.History))
	}
	busy := m.History[2]
	if busy.From != WorkerBusy || busy.To != WorkerIdle || busy.InPrevious != 10*time.Second || busy.Reason != "task done" {
		t.Errorf("busy->idle recorded as %+v", busy)
	}
	tr, changed, err := m.SetHealth(HealthDegraded, "3 probes failed", t0.Add(20*time.Second))
	if err != nil || !changed {
		t.Fatalf("SetHealth: %v %v", changed, err)
	}
	if tr.From != WorkerPaused || tr.To != WorkerPaused || tr.FromHealth != HealthUnknown || tr.ToHealth != HealthDegraded || tr.InPrevious != 6*time.Second {
		t.Errorf("health change recorded as %+v", tr)
	}
	if _, changed, _ := m.SetHealth(HealthDegraded, "again", t0.Add(21*time.Second)); changed {
		t.Error("setting the same health recorded a change")
	}
	if _, _, err := m.SetHealth("sick", "x", t0); err == nil {
		t.Error("unknown health accepted")
	}
	_, _ = m.Transition(WorkerStopping, "terminate", t0.Add(30*time.Second))
	_, _ = m.Transition(WorkerStopped, "exited", t0.Add(31*time.Second))
	if _, _, err := m.SetHealth(HealthHealthy, "late", t0.Add(32*time.Second)); err == nil {
		t.Error("health changed in a terminal state")
	}
}

func TestWorkerHistoryIsBounded(t *testing.T) {
	m := NewWorkerMachine("w1", time.Unix(0, 0))
	_, _ = m.Transition(WorkerIdle, "up", time.Unix(1, 0))
	for i := 0; i < 3*MaxWorkerHistory; i++ {
		_, _ = m.Transition(WorkerBusy, "task", time.Unix(int64(2*i+2), 0))
		_, _ = m.Transition(WorkerIdle, "done", time.Unix(int64(2*i+3), 0))
	}
	if len(m.History) != MaxWorkerHistory {
		t.Fatalf("history has %d entries, want %d", len(m.History), MaxWorkerHistory)
	}
	if last := m.History[len(m.History)-1]; last.To != WorkerIdle || last.Reason != "done" {
		t.Errorf("last entry %+v", last)
	}
}
