package spawner

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// The fleet's decisions over an in-memory Docker (newUnit) and a real
// Redis: this manager is host "a"; host "b" is another manager's, live or
// lost. The real engines side by side are the fault suite's (faults/,
// host lost mid-load).

func fleetUnit(t *testing.T, mods ...func(*Config)) *unit {
	t.Helper()
	u := newUnit(t, func(c *Config) {
		c.HostID, c.HostTTL = "a", 2*time.Second
		for _, m := range mods {
			m(c)
		}
	})
	ctx := context.Background()
	for _, st := range []string{u.keys.Commands(), u.keys.Control(), u.keys.HostCommands("a"), u.keys.HostCommands("b"), u.keys.HostControl("b")} {
		if err := u.s.rdb.EnsureGroup(ctx, st, protocol.ManagerGroup); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// place records a worker of host as placed there.
func (u *unit) place(t *testing.T, id, host string) {
	t.Helper()
	ctx := context.Background()
	u.rc.HSet(ctx, u.keys.Placement(), id, host)
	u.rc.HSet(ctx, u.keys.Status(id), protocol.StatusFieldHost, host)
}

// beat writes a worker's heartbeat as of at.
func (u *unit) beat(t *testing.T, id string, at time.Time) {
	t.Helper()
	doc, err := protocol.Heartbeat{WorkerID: id, Status: protocol.HeartbeatIdle, IntervalMS: 1000, Timestamp: at}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	u.rc.Set(context.Background(), u.keys.Heartbeat(id), doc, time.Minute)
}

// hostB registers host b, live for ttl from now (negative: lost).
func (u *unit) hostB(t *testing.T, ttl time.Duration) {
	t.Helper()
	if err := u.s.rdb.RenewHost(context.Background(), "b", u.now(), ttl, 4, nil, "engine-b"); err != nil {
		t.Fatal(err)
	}
}

func TestActionsOnAnotherHostsWorkerGoToThatHost(t *testing.T) {
	u := fleetUnit(t)
	ctx := context.Background()
	u.hostB(t, time.Minute)
	u.rc.SAdd(ctx, u.keys.Workers(), "wb")
	u.place(t, "wb", "b")
	c := parts{u.s}.commands(1)
	for _, action := range []protocol.Action{protocol.ActionPause, protocol.ActionDelete} {
		cmd := protocol.Command{ID: "c-" + string(action), Action: action, WorkerID: "wb", ReplyTo: u.keys.Replies("t")}
		doc, _ := cmd.Encode()
		id := u.rc.XAdd(ctx, &redis.XAddArgs{Stream: u.keys.Commands(), Values: protocol.Values(doc)}).Val()
		msgs, err := u.s.rdb.ReadNew(ctx, u.keys.Commands(), protocol.ManagerGroup, "m1", 1, time.Millisecond)
		if err != nil || len(msgs) != 1 || msgs[0].ID != id {
			t.Fatalf("read %v %v", msgs, err)
		}
		c.execute(u.keys.Commands(), msgs[0])
	}
	if n := u.rc.XLen(ctx, u.keys.HostCommands("b")).Val(); n != 2 {
		t.Fatalf("host b's stream has %d commands, want the pause and the delete", n)
	}
	if n := u.rc.XLen(ctx, u.keys.Replies("t")).Val(); n != 0 {
		t.Fatalf("this manager replied %d times to commands host b serves", n)
	}
	if !u.rc.SIsMember(ctx, u.keys.Workers(), "wb").Val() {
		t.Fatal("this manager retired a worker of a live host")
	}
	if len(u.d.Calls()) != 0 {
		t.Fatalf("this manager called its engine for another host's worker: %v", u.d.Calls())
	}
}

func TestAnActionOnAWorkerOfALostHostIsAnswered(t *testing.T) {
	u := fleetUnit(t)
	ctx := context.Background()
	u.hostB(t, -time.Second)
	u.rc.SAdd(ctx, u.keys.Workers(), "wb")
	u.place(t, "wb", "b")
	c := parts{u.s}.commands(1)
	var reply protocol.Reply
	c.runCommand(ctx, protocol.Command{ID: "p", Action: protocol.ActionPause, WorkerID: "wb"}, &reply, func(context.Context, string) error {
		t.Fatal("forwarded to a lost host")
		return nil
	})
	if reply.OK || reply.Error == nil || reply.Error.Code != protocol.CodeNoHost {
		t.Fatalf("pause on a lost host: %+v", reply)
	}
	reply = protocol.Reply{OK: true}
	c.runCommand(ctx, protocol.Command{ID: "d", Action: protocol.ActionDelete, WorkerID: "wb"}, &reply, nil)
	if !reply.OK || u.rc.SIsMember(ctx, u.keys.Workers(), "wb").Val() {
		t.Fatalf("delete of a lost host's worker: %+v, still a member: %v", reply, u.rc.SIsMember(ctx, u.keys.Workers(), "wb").Val())
	}
}

// A lost host: what was forwarded to it goes back to the shared streams;
// its dead workers (not beating, or paused) are retired, their tasks
// answered once with HOST_LOST; one still beating is left to run.
func TestALostHostsDeadWorkersAreRetired(t *testing.T) {
	u := fleetUnit(t)
	ctx := context.Background()
	now := u.now()
	u.hostB(t, -time.Second)
	for _, id := range []string{"silent", "paused", "beating"} {
		u.worker(t, id, "", now.Add(-time.Minute)) // no container on this engine
		u.place(t, id, "b")
	}
	u.rc.HSet(ctx, u.keys.Status("paused"), protocol.StatusFieldContainer, string(protocol.ContainerPaused))
	u.beat(t, "silent", now.Add(-5*time.Second))
	u.beat(t, "beating", now)
	u.task(t, "silent", "r-held", true)
	u.task(t, "silent", "r-waiting", false)
	u.task(t, "paused", "r-paused", false)
	doc, _ := protocol.Command{ID: "fwd", Action: protocol.ActionStatus, WorkerID: "silent"}.Encode()
	u.rc.XAdd(ctx, &redis.XAddArgs{Stream: u.keys.HostCommands("b"), Values: protocol.Values(doc)})

	w := parts{u.s}.hostWatch()
	w.judged = map[string]bool{}
	hosts, err := u.s.rdb.Hosts(ctx)
	if err != nil || len(hosts) != 1 {
		t.Fatal(hosts, err)
	}
	for i := 0; i < 2; i++ { // handled twice (another tick, another manager): once in effect
		w.lost(ctx, hosts[0])
		w.retires.Wait()
	}
	if n := u.rc.XLen(ctx, u.keys.Commands()).Val(); n != 1 {
		t.Fatalf("%d commands back on the shared stream, want 1", n)
	}
	for _, id := range []string{"silent", "paused"} {
		if u.rc.SIsMember(ctx, u.keys.Workers(), id).Val() {
			t.Fatalf("%s of the lost host is still a member", id)
		}
	}
	if !u.rc.SIsMember(ctx, u.keys.Workers(), "beating").Val() {
		t.Fatal("a worker still beating on a host without managers was retired")
	}
	outs := u.outputs(t, "silent")
	if len(outs) != 2 || outs["r-held"].Error == nil || outs["r-held"].Error.Code != protocol.CodeHostLost || !outs["r-held"].Error.Retryable {
		t.Fatalf("outputs of the silent worker: %+v", outs)
	}
	if o := u.outputs(t, "paused"); len(o) != 1 {
		t.Fatalf("outputs of the paused worker: %+v", o)
	}
	for _, id := range []string{"silent", "paused"} {
		if u.rc.HExists(ctx, u.keys.Placement(), id).Val() {
			t.Fatalf("%s kept its placement (its slot on b)", id)
		}
	}
	if hs, _ := u.s.rdb.Hosts(ctx); len(hs) != 1 || hs[0].LostAt.IsZero() {
		t.Fatalf("host b not marked lost while a worker is left on it: %+v", hs)
	}
	// Its last worker stops beating: retired, and the host is forgotten.
	u.beat(t, "beating", now.Add(-5*time.Second))
	w.lost(ctx, hosts[0])
	w.retires.Wait()
	w.lost(ctx, hosts[0])
	if hs, _ := u.s.rdb.Hosts(ctx); len(hs) != 0 {
		t.Fatalf("a lost host with nothing left is still registered: %+v", hs)
	}
}

// The reconciler of one host never retires another host's workers, which
// have no container on its engine.
func TestReconcileLeavesOtherHostsWorkers(t *testing.T) {
	u := fleetUnit(t)
	ctx := context.Background()
	u.hostB(t, time.Minute)
	u.worker(t, "wb", "", u.now().Add(-time.Hour))
	u.place(t, "wb", "b")
	u.worker(t, "wa", "", u.now().Add(-time.Hour)) // this host's, container gone
	u.place(t, "wa", "a")
	rep, err := u.s.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.MissingMarked != 1 || !u.rc.SIsMember(ctx, u.keys.Workers(), "wb").Val() || u.rc.SIsMember(ctx, u.keys.Workers(), "wa").Val() {
		t.Fatalf("reconcile: %+v; wb member %v, wa member %v", rep, u.rc.SIsMember(ctx, u.keys.Workers(), "wb").Val(), u.rc.SIsMember(ctx, u.keys.Workers(), "wa").Val())
	}
}

func TestFleetConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string {
			if k == "REDIS_URL" {
				return "redis://127.0.0.1:1/0"
			}
			return m[k]
		}
	}
	hostname, _ := os.Hostname()
	c, err := ConfigFromEnv(env(map[string]string{"HOST_ID": "build-3", "HOST_LABELS": "docker=true,zone=b", "HOST_TTL": "7s"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HostID != "build-3" || c.HostLabels["docker"] != "true" || c.HostLabels["zone"] != "b" || c.HostTTL != 7*time.Second {
		t.Fatalf("config %+v", c)
	}
	// Managers of several engines on one machine: consumer names of their own.
	if c.ManagerID != hostname+"-build-3" {
		t.Errorf("MANAGER_ID default with HOST_ID: %q", c.ManagerID)
	}
	if c, _ := ConfigFromEnv(env(nil)); c.ManagerID != hostname || c.HostID != "" {
		t.Errorf("defaults: MANAGER_ID %q, HOST_ID %q", c.ManagerID, c.HostID)
	}
	for _, bad := range []map[string]string{{"HOST_ID": "a:b"}, {"HOST_LABELS": "Bad Label"}, {"HOST_TTL": "soon"}} {
		if _, err := ConfigFromEnv(env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	// HOST_TTL defaults to two heartbeat intervals.
	s := New(Config{HeartbeatInterval: 3 * time.Second, HostID: "h"}, nil, nil, nil, nil)
	if s.cfg.HostTTL != 6*time.Second || s.Host() != "h" {
		t.Errorf("HostTTL %s, host %q", s.cfg.HostTTL, s.Host())
	}
}

// A long-lived worker of a lost host keeps its id: hibernated on the host
// that saw the loss and woken there at once (a new incarnation), its
// task in flight answered HOST_LOST and the task waiting on its input
// left for the new incarnation.
func TestALostHostsWorkerLivesOnHere(t *testing.T) {
	u := fleetUnit(t, func(c *Config) { c.NetworkMode = "host" })
	u.s.inst.images = &images.Builder{Docker: presentImages{}, BaseImage: images.DefaultBaseImage, Keys: u.keys}
	ctx := context.Background()
	now := u.now()
	u.hostB(t, -time.Second)
	u.worker(t, "moved", "", now.Add(-time.Minute))
	u.place(t, "moved", "b")
	u.rc.HSet(ctx, u.keys.Status("moved"), protocol.StatusFieldSpec, `{"agent_type":"claude","kind":"long-lived"}`, protocol.StatusFieldIncarnation, 1,
		protocol.StatusFieldRequestID, "r-held")
	u.beat(t, "moved", now.Add(-5*time.Second))
	u.task(t, "moved", "r-held", true)
	u.task(t, "moved", "r-waiting", false)

	w := parts{u.s}.hostWatch()
	w.judged = map[string]bool{}
	hosts, err := u.s.rdb.Hosts(ctx)
	if err != nil || len(hosts) != 1 {
		t.Fatal(hosts, err)
	}
	w.lost(ctx, hosts[0])
	w.retires.Wait()
	if !u.rc.SIsMember(ctx, u.keys.Workers(), "moved").Val() {
		st := u.rc.HGetAll(ctx, u.keys.Status("moved")).Val()
		t.Fatalf("the lost host's worker is not a member again (woken here): status %v", st)
	}
	st := u.rc.HGetAll(ctx, u.keys.Status("moved")).Val()
	if st[protocol.StatusFieldHost] != "a" || st[protocol.StatusFieldIncarnation] != "2" {
		t.Fatalf("status after the wake: host %q incarnation %q, want a and 2", st[protocol.StatusFieldHost], st[protocol.StatusFieldIncarnation])
	}
	if _, err := u.d.ContainerInspect(ctx, ContainerName("moved")); err != nil {
		t.Fatalf("no container of the new incarnation on this host's engine: %v", err)
	}
	outs := u.outputs(t, "moved")
	if len(outs) != 1 || outs["r-held"].Error == nil || outs["r-held"].Error.Code != protocol.CodeHostLost {
		t.Fatalf("outputs: %+v (want the task in flight answered HOST_LOST, the waiting one left for the new incarnation)", outs)
	}
	if n := u.rc.XLen(ctx, u.keys.Input("moved")).Val(); n != 2 {
		t.Fatalf("input has %d entries", n)
	}
}
