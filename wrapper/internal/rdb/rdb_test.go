package rdb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestFinishTaskPublishesOnceAndAcks(t *testing.T) {
	r := testkit.StartRedisWith(t, testkit.RedisOptions{Password: "pw-123456"})
	db, err := Open(r.URL(), "", protocol.Keys{})
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
	got, err := db.ReadGroup(ctx, []string{in}, "g", "c1", false, 1, time.Second)
	if err != nil || len(got) != 1 || got[0].Stream != in {
		t.Fatalf("read: %v %v", got, err)
	}
	e := got[0]
	if p, _ := db.ReadGroup(ctx, []string{in}, "g", "c1", true, 10, 0); len(p) != 1 || p[0].ID != e.ID {
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
	if p, _ := db.ReadGroup(ctx, []string{in}, "g", "c1", true, 10, 0); len(p) != 0 {
		t.Fatalf("entry still pending after finish: %v", p)
	}
	if st, _ := db.RunState(ctx, "unknown"); st != "" {
		t.Fatalf("unknown run has state %q", st)
	}
	if _, err := Open("http://nope", "", protocol.Keys{}); err == nil {
		t.Fatal("a non-redis URL was accepted")
	}
}

func openTest(t *testing.T) (*RDB, *testkit.Redis) {
	t.Helper()
	r := testkit.StartRedis(t)
	db, err := Open(r.URL(), "", protocol.Keys{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, r
}

// A requeued task starts again at requested while its run hash says
// running: the run never moves backward, keeps its creation time, and a
// terminal run is never touched.
func TestAdvanceRunNeverMovesBackward(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	key := db.Keys.Run("r1")
	db.c.HSet(ctx, key, protocol.RunFieldStatus, "running", protocol.RunFieldCreatedAt, "first", protocol.RunFieldAttempts, 1)
	tests := []struct {
		name       string
		fields     map[string]any
		wantStatus string
	}{
		{"requested after running", map[string]any{protocol.RunFieldStatus: "requested", protocol.RunFieldCreatedAt: "second", protocol.RunFieldWorkerID: "w2"}, "running"},
		{"queued after running", map[string]any{protocol.RunFieldStatus: "queued"}, "running"},
		{"running again", map[string]any{protocol.RunFieldStatus: "running", protocol.RunFieldStepsCompleted: 1}, "running"},
		{"completed", map[string]any{protocol.RunFieldStatus: "completed"}, "completed"},
		{"terminal is final", map[string]any{protocol.RunFieldStatus: "running", protocol.RunFieldWorkerID: "w3"}, "completed"},
	}
	for _, tt := range tests {
		if err := db.AdvanceRun(ctx, "r1", tt.fields); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if st, _ := db.c.HGet(ctx, key, protocol.RunFieldStatus).Result(); st != tt.wantStatus {
			t.Fatalf("%s: status %q, want %q", tt.name, st, tt.wantStatus)
		}
	}
	h, _ := db.c.HGetAll(ctx, key).Result()
	if h[protocol.RunFieldCreatedAt] != "first" || h[protocol.RunFieldWorkerID] != "w2" || h[protocol.RunFieldStepsCompleted] != "1" {
		t.Fatalf("run hash %v: want the first creation time, worker w2, one step", h)
	}
	rec, err := db.RunRecord(ctx, "r1")
	if err != nil || rec.State != protocol.RunCompleted || rec.Requeues != 1 {
		t.Fatalf("run record %+v %v", rec, err)
	}
	// A new run is written whole.
	db.AdvanceRun(ctx, "r2", map[string]any{protocol.RunFieldStatus: "requested", protocol.RunFieldCreatedAt: "now"})
	if h, _ := db.c.HGetAll(ctx, db.Keys.Run("r2")).Result(); h[protocol.RunFieldStatus] != "requested" || h[protocol.RunFieldCreatedAt] != "now" {
		t.Fatalf("new run %v", h)
	}
}

// The finish script counts the task's usage once with its output, sets
// the run hash's retention and trims the output stream.
func TestFinishTaskCountsUsageOnceWithRetention(t *testing.T) {
	db, r := openTest(t)
	ctx := context.Background()
	if _, err := r.Do("CONFIG", "SET", "stream-node-max-entries", "2"); err != nil {
		t.Fatal(err)
	}
	db.StreamMaxLen = 4
	in, out := "worker:w:input", "worker:w:output"
	for i := range 20 {
		db.XAdd(ctx, out, []byte(`{"n":1}`))
		_ = i
	}
	u := &TaskUsage{Project: "p", Session: "s", Worker: "w", Usage: protocol.Usage{Input: 10, Output: 2, CacheRead: 3, CacheCreation: 4}, CostUSD: 0.5}
	f := Finish{RequestID: "r1", OutputStream: out, Output: []byte(`{"x":1}`), InputStream: in, Group: "g",
		Run: map[string]any{"status": "failed"}, Usage: u, RunRetention: time.Hour}
	for range 3 {
		if _, err := db.FinishTask(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{db.Keys.UsageProject("p"), db.Keys.UsageSession("s"), db.Keys.UsageWorker("w")} {
		h, _ := db.c.HGetAll(ctx, key).Result()
		if h["input"] != "10" || h["output"] != "2" || h["cache_read"] != "3" || h["cache_creation"] != "4" || h["tasks"] != "1" || h["cost_usd"] != "0.5" {
			t.Errorf("%s = %v, want the task counted once", key, h)
		}
	}
	if ttl, _ := db.c.PTTL(ctx, db.Keys.Run("r1")).Result(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("run hash TTL %v, want up to the retention", ttl)
	}
	if ttl, _ := db.c.PTTL(ctx, db.Keys.UsageSession("s")).Result(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("session usage TTL %v, want the run retention after its last task", ttl)
	}
	if ttl, _ := db.c.PTTL(ctx, db.Keys.UsageProject("p")).Result(); ttl != -1 {
		t.Errorf("project usage TTL %v, want none (it is the project's bill)", ttl)
	}
	if n, _ := db.c.XLen(ctx, out).Result(); n > 8 {
		t.Errorf("output stream holds %d entries, want about 4", n)
	}
}

func TestServerErrorsArePermanent(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	db.c.Set(ctx, db.Keys.Run("r1"), "not a hash", 0)
	_, err := db.RunRecord(ctx, "r1")
	if err == nil || !IsServerError(err) {
		t.Fatalf("WRONGTYPE: %v, permanent %v", err, IsServerError(err))
	}
	if _, err := db.FinishTask(ctx, Finish{RequestID: "r1", OutputStream: "o", InputStream: "i", Output: []byte("{}")}); !IsServerError(err) {
		t.Fatalf("finish on a string run key: %v", err)
	}
	db.Close()
	if err := db.Ping(ctx); err == nil || IsServerError(err) {
		t.Fatalf("a closed client: %v is not a refusal", err)
	}
}

func TestMalformedURLErrorHasNoPassword(t *testing.T) {
	_, err := Open("redis://:supersecret@127.0.0.1:notaport/0", "", protocol.Keys{})
	if err == nil || strings.Contains(err.Error(), "supersecret") {
		t.Fatalf("error %v", err)
	}
}

// Usage outside any task (a summary turn) adds to the project's and the
// worker's counters without counting a task, and to the session's only
// while its counters exist, keeping their expiry.
func TestAddUsageCountsNoTask(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	f := Finish{RequestID: "r1", OutputStream: "worker:w:output", Output: []byte(`{"x":1}`), InputStream: "worker:w:input", Group: "g",
		Run: map[string]any{"status": "completed"}, RunRetention: time.Hour,
		Usage: &TaskUsage{Project: "p", Session: "s", Worker: "w", Usage: protocol.Usage{Input: 10, Output: 2}, CostUSD: 0.5}}
	if _, err := db.FinishTask(ctx, f); err != nil {
		t.Fatal(err)
	}
	for _, session := range []string{"s", "gone"} {
		u := TaskUsage{Project: "p", Session: session, Worker: "w", Usage: protocol.Usage{Input: 7, Output: 3, CacheRead: 5, CacheCreation: 1}, CostUSD: 0.25}
		if err := db.AddUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range map[string][]string{
		db.Keys.UsageProject("p"): {"24", "8", "10", "2", "1", "1"}, // the task's and both turns'
		db.Keys.UsageWorker("w"):  {"24", "8", "10", "2", "1", "1"},
		db.Keys.UsageSession("s"): {"17", "5", "5", "1", "1", "0.75"},
	} {
		h, _ := db.c.HGetAll(ctx, key).Result()
		got := []string{h["input"], h["output"], h["cache_read"], h["cache_creation"], h["tasks"], h["cost_usd"]}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s = %v, want input, output, cache_read, cache_creation, tasks, cost %v", key, h, want)
		}
	}
	if n, _ := db.c.Exists(ctx, db.Keys.UsageSession("gone")).Result(); n != 0 {
		t.Error("a session's counters that had expired were made again, with no expiry")
	}
	if ttl, _ := db.c.PTTL(ctx, db.Keys.UsageSession("s")).Result(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("session usage TTL %v, want its expiry kept", ttl)
	}
}
