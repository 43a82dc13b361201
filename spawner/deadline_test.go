package spawner

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

// With no manager running a create fails at once (NO_MANAGER) and sends
// nothing; commands whose deadline passed while no manager ran are
// answered COMMAND_EXPIRED by the manager that starts afterwards, logged
// and counted, and it makes no worker.
func TestExpiredCommandsAreNotCarriedOut(t *testing.T) {
	f := newFixture(t, nil)
	m := NewMetrics(f.rc, f.keys, 10)
	f.s.UseMetrics(m, "")
	ctx := context.Background()
	spec := protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "late"}

	start := time.Now()
	_, err := (&client.Commands{Redis: f.rc, Keys: f.keys, Timeout: 6 * time.Minute}).Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &spec})
	if !client.IsNoManager(err) || !client.HasCode(err, protocol.CodeNoManager) {
		t.Fatalf("create with no manager: %v, want NO_MANAGER", err)
	}
	t.Logf("NO_MANAGER after %v", time.Since(start))
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("NO_MANAGER took %v", took)
	}

	// Commands whose senders gave up while no manager ran (sent by hand:
	// the client does not send with no manager alive).
	replies := f.keys.Replies("gone")
	deadline := time.Now().Add(300 * time.Millisecond)
	for _, cmd := range []protocol.Command{
		{ID: "late-create", Action: protocol.ActionCreate, Spec: &spec},
		{ID: "late-delete", Action: protocol.ActionDelete, WorkerID: "w-none"},
	} {
		cmd.ReplyTo, cmd.Timestamp, cmd.Deadline = replies, time.Now(), deadline
		doc, err := cmd.Encode()
		if err != nil {
			t.Fatal(err)
		}
		testkit.XAdd(t, f.rc, f.keys.Commands(), doc)
	}
	time.Sleep(time.Until(deadline))
	f.startManager(t)

	got := map[string]protocol.Code{}
	testkit.Eventually(t, "both commands answered", 30*time.Second, func() bool {
		for _, msg := range f.rc.XRange(ctx, replies, "-", "+").Val() {
			data, _ := protocol.EntryData(msg.Values)
			if r, err := protocol.DecodeReply(data); err == nil && r.Error != nil {
				got[r.CommandID] = r.Error.Code
			}
		}
		return len(got) == 2
	})
	for _, id := range []string{"late-create", "late-delete"} {
		if got[id] != protocol.CodeCommandExpired {
			t.Errorf("%s answered %q, want COMMAND_EXPIRED", id, got[id])
		}
	}
	for _, action := range []string{"create", "delete"} {
		if n := testutil.ToFloat64(m.expired.WithLabelValues(action)); n != 1 {
			t.Errorf("agentvisor_commands_expired_total{action=%q} = %v, want 1", action, n)
		}
	}
	gs, err := f.rc.XInfoGroups(ctx, f.keys.Commands()).Result()
	if err != nil || len(gs) != 1 || gs[0].Pending != 0 {
		t.Errorf("commands left pending: %+v, %v", gs, err)
	}
	// Long enough for a create to have made its worker.
	time.Sleep(3 * time.Second)
	if n := f.rc.SCard(ctx, f.keys.Workers()).Val(); n != 0 {
		t.Errorf("%d workers made from expired creates", n)
	}
}

// A create queued for a slot gives up at its deadline: COMMAND_EXPIRED,
// out of the queue, no second worker.
func TestQueuedCreateGivesUpAtItsDeadline(t *testing.T) {
	buildBenchBase(t)
	f := newFixture(t, func(c *Config) {
		useFakeAgent(c)
		c.MaxWorkers = 1
		c.CreationTimeout = 5 * time.Minute
		c.KeepIdleAtLimit = true // the create queues: no idle worker is hibernated for it
	})
	c := f.startManager(t)
	ctx := context.Background()
	if _, err := c.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &fakeSpec}); err != nil {
		t.Fatal(err)
	}
	short := &client.Commands{Redis: f.rc, Keys: f.keys, Timeout: 3 * time.Second}
	start := time.Now()
	_, err := short.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &fakeSpec})
	if !client.HasCode(err, protocol.CodeCommandExpired) {
		t.Fatalf("queued create past its deadline: %v, want COMMAND_EXPIRED", err)
	}
	t.Logf("answered %v after the send: %v", time.Since(start), err)
	if n := f.rc.LLen(ctx, ctlplane.CreationQueueKey(f.keys)).Val(); n != 0 {
		t.Errorf("%d creates left in the queue", n)
	}
	time.Sleep(2 * time.Second)
	if n := f.rc.SCard(ctx, f.keys.Workers()).Val(); n != 1 {
		t.Errorf("%d workers, want the first create's alone", n)
	}
}
