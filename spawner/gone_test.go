package spawner

import (
	"context"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// A task sent to a worker after it was deleted is answered: failed
// WORKER_GONE (not retryable), within an interval, once each; the
// worker's tasks answered before its delete are left as they were.
func TestTaskToARetiredWorkerIsAnswered(t *testing.T) {
	buildBenchBase(t)
	f := newFixture(t, func(c *Config) { useFakeAgent(c); c.HeartbeatInterval = time.Second })
	f.startManager(t)
	ctx := context.Background()
	info, err := f.s.Create(ctx, fakeSpec)
	if err != nil {
		t.Fatal(err)
	}
	f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: "before", Prompt: "work"})
	if o := f.waitOutput(t, f.keys.Output(info.WorkerID), "before", time.Minute); o.Status != protocol.StatusComplete {
		t.Fatalf("before the delete: %+v", o)
	}
	if err := f.s.Delete(ctx, info.WorkerID); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for _, id := range []string{"late-1", "late-2"} {
		f.send(t, f.keys.Input(info.WorkerID), protocol.Task{RequestID: id, Prompt: "work"})
	}
	for _, id := range []string{"late-1", "late-2"} {
		o := f.waitOutput(t, f.keys.Output(info.WorkerID), id, 10*time.Second)
		if o.Status != protocol.StatusFailed || o.Error == nil || o.Error.Code != protocol.CodeWorkerGone || o.Error.Retryable {
			t.Fatalf("%s: %+v %+v, want failed WORKER_GONE, not retryable", id, o, o.Error)
		}
	}
	if d := time.Since(sent); d > 3*time.Second {
		t.Errorf("answered %v after the send, want within an interval or two", d)
	}
	time.Sleep(2 * time.Second) // more rounds of the leader: nothing answered twice
	counts := map[string]int{}
	msgs, err := f.rc.XRange(ctx, f.keys.Output(info.WorkerID), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if o, err := protocol.DecodeOutput(data); err == nil {
			counts[o.RequestID]++
		}
	}
	for _, id := range []string{"before", "late-1", "late-2"} {
		if counts[id] != 1 {
			t.Errorf("%s answered %d times", id, counts[id])
		}
	}
}
