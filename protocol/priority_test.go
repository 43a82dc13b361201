package protocol

import (
	"strings"
	"testing"
)

// While every queue has tasks, each priority goes first in its weight's
// share of the turns, low included; the others follow highest first.
func TestPriorityOrderWeightsAndNoStarvation(t *testing.T) {
	var o PriorityOrder
	first := map[Priority]int{}
	lastLow, maxGap := 0, 0
	for i := 1; i <= 700; i++ {
		order := o.Next()
		if len(order) != 3 {
			t.Fatalf("order %v", order)
		}
		first[order[0]]++
		if order[0] == PriorityLow {
			maxGap, lastLow = max(maxGap, i-lastLow), i
		}
		rest := order[1:]
		for j := 1; j < len(rest); j++ {
			if idx(rest[j-1]) > idx(rest[j]) {
				t.Fatalf("turn %d: the others are not highest first: %v", i, order)
			}
		}
	}
	if first[PriorityHigh] != 400 || first[PriorityNormal] != 200 || first[PriorityLow] != 100 {
		t.Errorf("first reads %v, want 400/200/100", first)
	}
	if maxGap > 7 {
		t.Errorf("low waited %d turns for its turn", maxGap)
	}
}

func idx(p Priority) int {
	for i, q := range Priorities {
		if q == p {
			return i
		}
	}
	return -1
}

func TestTaskPriority(t *testing.T) {
	for _, p := range []Priority{"", PriorityHigh, PriorityNormal, PriorityLow} {
		task := NewTask("r1", "hi")
		task.Priority = p
		doc, err := task.Encode()
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		got, err := DecodeTask(doc)
		if err != nil || got.Priority != p {
			t.Fatalf("%q: %+v %v", p, got, err)
		}
	}
	task := NewTask("r1", "hi")
	task.Priority = "urgent"
	if err := task.Validate(); err == nil || !strings.Contains(err.Error(), "priority") {
		t.Errorf("priority urgent: %v", err)
	}
	if PriorityLow.Or() != PriorityLow || Priority("").Or() != PriorityNormal {
		t.Error("Or")
	}
}

func TestDeveloperQueueKeys(t *testing.T) {
	k := Keys{}
	want := []string{"worker:developer:input:high", "worker:developer:input", "worker:developer:input:low"}
	got := k.DeveloperInputs()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("DeveloperInputs = %v", got)
	}
	if k.DeveloperInputFor("") != "worker:developer:input" {
		t.Error("no priority is normal")
	}
	if got := k.InputsFor(KindLongLived, "w1"); len(got) != 1 || got[0] != "worker:w1:input" {
		t.Errorf("InputsFor long-lived = %v", got)
	}
	if k.StatusHistory("w1") != "worker:status:w1:history" || k.DeveloperIdle() != "worker:developer:idle" {
		t.Error("history or idle key")
	}
}
