package rdb

import (
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// A hibernated worker holds no slot; whoever takes it out of its host's
// hibernated set first wins (a wake joins Workers, a delete ends it); a
// lost host's hibernated workers are adopted by another host.
func TestHibernationWakeDeleteAndAdoption(t *testing.T) {
	r, ctx := newRDB(t)
	for _, id := range []string{"w1", "w2", "w3"} {
		if err := r.c.SAdd(ctx, r.Keys.Workers(), id).Err(); err != nil {
			t.Fatal(err)
		}
		if owns, _, err := r.BeginRetire(ctx, id, "hibernating", t0, time.Minute); err != nil || !owns {
			t.Fatalf("begin %s: %v %v", id, owns, err)
		}
		if ok, err := r.Hibernate(ctx, id, "h1"); err != nil || !ok {
			t.Fatalf("hibernate %s: %v %v", id, ok, err)
		}
	}
	workers, creating, retiring, err := r.Slots(ctx)
	if err != nil || len(workers)+len(creating)+len(retiring) != 0 {
		t.Fatalf("slots of hibernated workers: %v %v %v %v", workers, creating, retiring, err)
	}
	// A wake admitted (replace mode for brevity) joins Workers.
	if _, err := r.Admit(ctx, "w1", t0, time.Minute, AdmitReplace, "h1", nil); err != nil {
		t.Fatal(err)
	}
	if n, err := r.WakeJoin(ctx, "h1", "w1"); n != 1 || err != nil {
		t.Fatalf("wake join: %d %v", n, err)
	}
	if ok, _ := r.IsWorker(ctx, "w1"); !ok {
		t.Fatal("the woken worker is not a member")
	}
	// A delete takes w2 out first: its wake finds it gone.
	if ok, err := r.Unhibernate(ctx, "h1", "w2"); !ok || err != nil {
		t.Fatalf("unhibernate: %v %v", ok, err)
	}
	if _, err := r.Admit(ctx, "w2", t0, time.Minute, AdmitReplace, "h1", nil); err != nil {
		t.Fatal(err)
	}
	if n, err := r.WakeJoin(ctx, "h1", "w2"); n != 0 || err != nil {
		t.Fatalf("wake join after a delete: %d %v", n, err)
	}
	if ok, _ := r.IsWorker(ctx, "w2"); ok {
		t.Fatal("a deleted worker joined")
	}
	// h1 is lost: h2 adopts w3.
	ids, err := r.Adopt(ctx, "h1", "h2")
	if err != nil || len(ids) != 1 || ids[0] != "w3" {
		t.Fatalf("adopted %v %v", ids, err)
	}
	if hib, _ := r.IsHibernated(ctx, "h2", "w3"); !hib {
		t.Fatal("w3 is not h2's")
	}
	if host := r.c.HGet(ctx, r.Keys.Status("w3"), protocol.StatusFieldHost).Val(); host != "h2" {
		t.Fatalf("w3's status names host %q", host)
	}
}
