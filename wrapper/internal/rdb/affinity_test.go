package rdb

import (
	"context"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// A hand-off gives the entry to a consumer in the idle set with a fresh
// score, keeping its delivery count, and takes it out of the set; a stale
// or absent one does not get it.
func TestHandOff(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	in, idle := "handoff:in", "handoff:idle"
	if err := db.EnsureGroup(ctx, in, "g"); err != nil {
		t.Fatal(err)
	}
	doc, _ := protocol.NewTask("r1", "p").Encode()
	if err := db.XAdd(ctx, in, doc); err != nil {
		t.Fatal(err)
	}
	got, err := db.ReadGroup(ctx, []string{in}, "g", "reader", false, 1, -1)
	if err != nil || len(got) != 1 {
		t.Fatalf("read %v %v", got, err)
	}
	id, now := got[0].ID, time.Now()
	if ok, err := db.HandOff(ctx, in, idle, "g", "holder", id, now.Add(-time.Second)); err != nil || ok {
		t.Fatalf("hand-off to a consumer not in the idle set: %v %v", ok, err)
	}
	_ = db.SetIdle(ctx, idle, "holder", true, now.Add(-time.Minute))
	if ok, _ := db.HandOff(ctx, in, idle, "g", "holder", id, now.Add(-time.Second)); ok {
		t.Fatal("hand-off to a consumer whose score is stale")
	}
	_ = db.SetIdle(ctx, idle, "holder", true, now)
	if ok, err := db.HandOff(ctx, in, idle, "g", "holder", id, now.Add(-time.Second)); err != nil || !ok {
		t.Fatalf("hand-off: %v %v", ok, err)
	}
	if mine, _ := db.ReadGroup(ctx, []string{in}, "g", "reader", true, 10, 0); len(mine) != 0 {
		t.Errorf("the reader still holds %v", mine)
	}
	theirs, _ := db.ReadGroup(ctx, []string{in}, "g", "holder", true, 10, 0)
	if len(theirs) != 1 || theirs[0].ID != id {
		t.Fatalf("the holder's pending entries: %v", theirs)
	}
	if n, _ := db.DeliveryCount(ctx, in, "g", id); n != 1 {
		t.Errorf("delivery count %d after the hand-off, want 1", n)
	}
	if _, err := db.c.ZScore(ctx, idle, "holder").Result(); err == nil {
		t.Error("the holder is still in the idle set")
	}
}
