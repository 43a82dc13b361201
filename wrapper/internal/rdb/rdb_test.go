package rdb

import (
	"context"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/protocol/testkit"
)

func TestFinishTaskPublishesOnceAndAcks(t *testing.T) {
	r := testkit.StartRedisWith(t, testkit.RedisOptions{Password: "pw-123456"})
	db, err := Open(r.URL(), protocol.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	in, out := "worker:w:input", "worker:w:output"
	if err := db.EnsureGroup(ctx, in, "g"); err != nil {
		t.Fatal(err)
	}
	if err := db.EnsureGroup(ctx, in, "g"); err != nil {
		t.Fatalf("second EnsureGroup: %v", err)
	}
	doc, _ := protocol.NewTask("r1", "p").Encode()
	if err := db.XAdd(ctx, in, doc); err != nil {
		t.Fatal(err)
	}
	e, err := db.ReadTask(ctx, in, "g", "c1", false, time.Second)
	if err != nil || e == nil {
		t.Fatalf("read: %v %v", e, err)
	}
	if p, _ := db.ReadTask(ctx, in, "g", "c1", true, 0); p == nil || p.ID != e.ID {
		t.Fatalf("pending read gave %v", p)
	}
	if n, _ := db.DeliveryCount(ctx, in, "g", e.ID); n != 2 {
		t.Errorf("delivery count %d, want 2", n)
	}
	f := Finish{RequestID: "r1", OutputStream: out, Output: []byte(`{"x":1}`), InputStream: in, Group: "g", EntryID: e.ID,
		Run: map[string]any{"status": "completed", "request_id": "r1"}}
	for i, want := range []bool{true, false, false} {
		got, err := db.FinishTask(ctx, f)
		if err != nil || got != want {
			t.Fatalf("finish #%d: published %v (%v), want %v", i+1, got, err, want)
		}
	}
	if n, _ := db.c.XLen(ctx, out).Result(); n != 1 {
		t.Fatalf("%d outputs, want 1", n)
	}
	if st, _ := db.RunState(ctx, "r1"); st != protocol.RunCompleted {
		t.Fatalf("run state %q", st)
	}
	if p, _ := db.ReadTask(ctx, in, "g", "c1", true, 0); p != nil {
		t.Fatalf("entry still pending after finish: %v", p)
	}
	if st, _ := db.RunState(ctx, "unknown"); st != "" {
		t.Fatalf("unknown run has state %q", st)
	}
	if _, err := Open("http://nope", protocol.Keys{}); err == nil {
		t.Fatal("a non-redis URL was accepted")
	}
}
