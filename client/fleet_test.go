package client

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/client/internal/redistest"
	"github.com/agentvisor/agentvisor/protocol"
)

// Fleet reads what the managers and workers keep, on a real Redis with
// the keys written by hand.
func TestFleetReads(t *testing.T) {
	rc := redistest.NewClient(t)
	keys := protocol.Keys{Prefix: "fleettest"}
	ctx := context.Background()
	f := &Fleet{Redis: rc, Keys: keys}

	if _, err := f.Worker(ctx, "w1"); !IsNotFound(err) {
		t.Fatalf("a worker with no status: %v, want NOT_FOUND", err)
	}
	rc.SAdd(ctx, keys.Workers(), "w2", "w1", "gone")
	rc.HSet(ctx, keys.Status("w1"), protocol.StatusFieldState, "idle")
	rc.HSet(ctx, keys.Status("w2"), protocol.StatusFieldState, "busy")
	hb, err := protocol.Heartbeat{WorkerID: "w1", Status: "idle", IntervalMS: 5000, Timestamp: time.Now().UTC()}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	rc.Set(ctx, keys.Heartbeat("w1"), hb, 0)
	rc.Set(ctx, keys.Heartbeat("w2"), "not json", 0)

	ids, err := f.Workers(ctx)
	if err != nil || len(ids) != 3 || ids[0] != "gone" || ids[1] != "w1" {
		t.Fatalf("workers %v %v, want sorted", ids, err)
	}
	all, err := f.Statuses(ctx, ids)
	if err != nil || len(all) != 2 {
		t.Fatalf("statuses %+v %v: want the two with a status hash", all, err)
	}
	if all[0].ID != "w1" || all[0].Heartbeat == nil || all[0].Heartbeat.WorkerID != "w1" || all[1].Heartbeat != nil {
		t.Fatalf("statuses %+v: w1's heartbeat decoded, w2's undecodable one left out", all)
	}

	rc.HSet(ctx, keys.UsageProject("shop"), protocol.UsageFieldTasks, 3, protocol.UsageFieldInput, 100, protocol.UsageFieldCostUSD, "0.25")
	rc.HSet(ctx, keys.ProjectBudget("shop"), protocol.BudgetFieldLimitUSD, "1.5")
	if ps, err := f.UsageProjects(ctx, 0); err != nil || len(ps) != 1 || ps[0] != "shop" {
		t.Fatalf("usage projects %v %v", ps, err)
	}
	if u, err := f.Usage(ctx, "shop"); err != nil || u != (ProjectUsage{ProjectID: "shop", Tasks: 3, Input: 100, CostUSD: 0.25}) {
		t.Fatalf("usage %+v %v", u, err)
	}
	if b, err := f.Budget(ctx, "shop"); err != nil || b != (ProjectBudget{ProjectID: "shop", LimitUSD: 1.5, SpentUSD: 0.25}) {
		t.Fatalf("budget %+v %v", b, err)
	}

	for i, ev := range []protocol.Event{protocol.EventCreated, protocol.EventStarted, protocol.EventPaused} {
		redistest.XAdd(t, rc, keys.Lifecycle(), redistest.Doc(protocol.Lifecycle{WorkerID: "w1", Event: ev, Source: "spawner", Timestamp: time.Now().Add(time.Duration(i))}))
	}
	recent, err := f.Recent(ctx, keys.Lifecycle(), 2)
	if err != nil || len(recent) != 2 || recent[0].Lifecycle == nil || recent[1].Lifecycle == nil || recent[0].Lifecycle.Event != protocol.EventStarted || recent[1].Lifecycle.Event != protocol.EventPaused {
		t.Fatalf("recent %+v %v: want the last two, oldest first", recent, err)
	}
	if all, err := f.Entries(ctx, keys.Lifecycle()); err != nil || len(all) != 3 {
		t.Fatalf("entries %d %v", len(all), err)
	}
}

// Workers lists the hibernated workers of every host beside the members
// of the workers set: a consumer that holds a hibernated worker's id finds
// it (list, status, send).
func TestFleetWorkersHoldTheHibernated(t *testing.T) {
	rc := redistest.NewClient(t)
	keys := protocol.Keys{Prefix: "hibtest"}
	ctx := context.Background()
	rc.SAdd(ctx, keys.Workers(), "live")
	rc.SAdd(ctx, keys.HibernatedHosts(), "h1", "h2") // h2's managers stopped: it is in no other list
	rc.SAdd(ctx, keys.Hibernated("h1"), "sleeping-1")
	rc.SAdd(ctx, keys.Hibernated("h2"), "sleeping-2", "live") // a wake under way
	ids, err := (&Fleet{Redis: rc, Keys: keys}).Workers(ctx)
	if err != nil || strings.Join(ids, " ") != "live sleeping-1 sleeping-2" {
		t.Fatalf("workers %v %v, want the live one and each host's hibernated ones, once each", ids, err)
	}
}

// History reads a worker's transitions newest first, leaving out what
// does not decode.
func TestFleetHistory(t *testing.T) {
	rc := redistest.NewClient(t)
	keys := protocol.Keys{Prefix: "histtest"}
	ctx := context.Background()
	f := &Fleet{Redis: rc, Keys: keys}
	for _, tr := range []protocol.WorkerTransition{
		{From: protocol.WorkerStarting, To: protocol.WorkerIdle, Reason: "started", InPrevious: time.Second},
		{From: protocol.WorkerIdle, To: protocol.WorkerBusy, Reason: "task r1", InPrevious: 2 * time.Second},
	} {
		doc, _ := json.Marshal(tr.Record())
		rc.LPush(ctx, keys.StatusHistory("w1"), doc)
	}
	rc.LPush(ctx, keys.StatusHistory("w1"), "not json")
	h, err := f.History(ctx, "w1")
	if err != nil || len(h) != 2 || h[0].To != protocol.WorkerBusy || h[0].InPreviousMS != 2000 || h[1].Reason != "started" {
		t.Fatalf("history %+v %v", h, err)
	}
	if h, err := f.History(ctx, "nobody"); err != nil || len(h) != 0 {
		t.Errorf("no history: %+v %v", h, err)
	}
}
