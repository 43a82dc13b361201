package spawner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

// The decision logic of the control plane, over the Docker engine on an
// in-memory Docker (engine/docker/dockertest) and a real Redis: fast, no
// container started.

func TestReconcileDiff(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	old, young := u.now().Add(-time.Hour), u.now()
	u.d.Add("orphan-old", "running", u.labels("orphan-old", old), old)
	u.d.Add("orphan-young", "running", u.labels("orphan-young", young), young)
	u.rc.ZAdd(ctx, ctlplane.CreatingKey(u.keys), redisZ(u.now().Add(time.Minute), "being-made"))
	u.d.Add(ContainerName("being-made"), "created", u.labels("being-made", old), old)
	u.worker(t, "stuck", "created", old) // joined, never started
	u.worker(t, "fine", "running", old)  // nothing to do
	u.worker(t, "vanished", "", old)     // member without a container
	u.task(t, "vanished", "req-vanished", true)
	u.worker(t, "exited", "exited", old) // died unseen

	rep, err := u.s.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphansRemoved != 1 || rep.Started != 1 || rep.MissingMarked != 1 || rep.Exited != 1 {
		t.Fatalf("report %+v", rep)
	}
	for name, want := range map[string]bool{"orphan-old": false, "orphan-young": true, ContainerName("being-made"): true,
		ContainerName("stuck"): true, ContainerName("fine"): true, ContainerName("exited"): false} {
		if u.d.Has(name) != want {
			t.Errorf("container %s present=%v, want %v", name, !want, want)
		}
	}
	if c, _ := u.d.ContainerInspect(ctx, ContainerName("stuck")); !c.State.Running {
		t.Error("the stuck worker was not started")
	}
	if o, ok := u.outputs(t, "vanished")["req-vanished"]; !ok || o.Error == nil || o.Error.Code != protocol.CodeKilled {
		t.Errorf("the vanished worker's task: %+v (answered %v)", o, ok)
	}
	if ws := u.rc.SMembers(ctx, u.keys.Workers()).Val(); len(ws) != 2 {
		t.Errorf("workers left %v, want stuck and fine", ws)
	}
}

// A retirement whose manager died is finished by the reconciler.
func TestRetirementTakeover(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	u.worker(t, "w", "running", u.now())
	u.task(t, "w", "held", true)
	u.task(t, "w", "waiting", false)
	// A manager began the retirement and died.
	if owns, _, _ := u.s.rdb.BeginRetire(ctx, "w", "deleted", u.now(), u.s.cfg.LeaseTTL); !owns {
		t.Fatal("could not begin")
	}
	if n := (parts{u.s}).reconciler().finishRetirements(ctx, nil); n != 0 {
		t.Fatalf("a live retirement was taken over (%d)", n)
	}
	u.advance(u.s.cfg.LeaseTTL + time.Second)
	if n := (parts{u.s}).reconciler().finishRetirements(ctx, nil); n != 1 {
		t.Fatalf("taken over %d retirements, want 1", n)
	}
	outs := u.outputs(t, "w")
	if len(outs) != 2 {
		t.Fatalf("outputs %v, want held and waiting answered once each", outs)
	}
	if u.d.Has(ContainerName("w")) {
		t.Error("container left")
	}
	if n := u.rc.ZCard(ctx, ctlplane.RetiringKey(u.keys)).Val(); n != 0 {
		t.Error("still retiring")
	}
}

// Every pause path refuses a worker with a task in flight, held or
// waiting, and says why.
func TestPauseEligibility(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(id string)
		busy  bool
	}{
		{"idle", func(string) {}, false},
		{"task waiting", func(id string) { u.task(t, id, id+"-r", false) }, true},
		{"task read", func(id string) { u.task(t, id, id+"-r", true) }, true},
		{"status busy", func(id string) {
			u.rc.HSet(ctx, u.keys.Status(id), protocol.StatusFieldState, string(protocol.WorkerBusy))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "p-" + tc.name
			u.worker(t, id, "running", u.now())
			tc.setup(id)
			err := u.s.Pause(ctx, id)
			if tc.busy != IsBusy(err) || (!tc.busy && err != nil) {
				t.Fatalf("pause: %v", err)
			}
			c, _ := u.d.ContainerInspect(ctx, ContainerName(id))
			if c.State.Paused == tc.busy {
				t.Errorf("paused=%v", c.State.Paused)
			}
			if tc.busy && ProtocolError(err).Code != protocol.CodeWorkerBusy {
				t.Errorf("code %s", ProtocolError(err).Code)
			}
		})
	}
}

// On an engine that cannot freeze, a pause hibernates a worker that can
// hibernate (its container goes, its identity stays) and leaves one that
// cannot running; a busy worker is refused as everywhere.
func TestPauseWithoutAFreeze(t *testing.T) {
	u := newUnitOf(t, nil, true)
	ctx := context.Background()

	u.worker(t, "no-spec", "running", u.now())
	if err := u.s.Pause(ctx, "no-spec"); err != nil {
		t.Fatalf("pause a worker that cannot hibernate: %v", err)
	}
	if c, err := u.d.ContainerInspect(ctx, ContainerName("no-spec")); err != nil || c.State.Paused || !c.State.Running {
		t.Errorf("it should run on, idle: %+v, %v", c.State, err)
	}

	u.worker(t, "busy", "running", u.now())
	u.rc.HSet(ctx, u.keys.Status("busy"), protocol.StatusFieldSpec, `{"agent_type":"claude","kind":"long-lived"}`)
	u.task(t, "busy", "busy-r", true)
	if err := u.s.Pause(ctx, "busy"); !IsBusy(err) {
		t.Errorf("pause a busy worker: %v, want WORKER_BUSY", err)
	}

	u.worker(t, "long", "running", u.now())
	u.rc.HSet(ctx, u.keys.Status("long"), protocol.StatusFieldSpec, `{"agent_type":"claude","kind":"long-lived"}`)
	if err := u.s.Pause(ctx, "long"); err != nil {
		t.Fatalf("pause a long-lived worker: %v", err)
	}
	if _, err := u.d.ContainerInspect(ctx, ContainerName("long")); err == nil {
		t.Error("its container is still there: a pause without a freeze hibernates")
	}
	st := u.rc.HGetAll(ctx, u.keys.Status("long")).Val()
	if st[protocol.StatusFieldState] != string(protocol.WorkerHibernated) {
		t.Errorf("status %v, want hibernated", st)
	}
	if err := u.s.Unpause(ctx, "no-spec"); err != nil {
		t.Errorf("unpause a worker that runs: %v", err)
	}
}

// A pause sent on a task's output is not refused for the moment the
// wrapper's status still names the answered task: it waits for the
// status to say idle. A task whose run is not answered stays a refusal.
func TestPauseOnTheOutputWaitsForIdle(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	answered := func(id, req string, state protocol.RunState) {
		u.rc.HSet(ctx, u.keys.Status(id), protocol.StatusFieldRequestID, req)
		u.rc.HSet(ctx, u.keys.Run(req), protocol.RunFieldStatus, string(state))
	}
	u.worker(t, "done", "running", u.now())
	answered("done", "done-r", protocol.RunCompleted)
	go func() {
		time.Sleep(150 * time.Millisecond) // the wrapper's status write, after its output
		u.rc.HSet(ctx, u.keys.Status("done"), protocol.StatusFieldRequestID, "")
	}()
	if err := u.s.Pause(ctx, "done"); err != nil {
		t.Fatalf("pause on the output: %v", err)
	}
	if c, _ := u.d.ContainerInspect(ctx, ContainerName("done")); !c.State.Paused {
		t.Error("not paused")
	}
	u.worker(t, "running", "running", u.now())
	answered("running", "running-r", protocol.RunRunning)
	start := time.Now()
	if err := u.s.Pause(ctx, "running"); !IsBusy(err) {
		t.Fatalf("pause of a worker whose task runs: %v, want WORKER_BUSY", err)
	}
	if d := time.Since(start); d >= finishingWait {
		t.Errorf("the refusal of a running task waited %v, as for an answered one", d)
	}
}

// Liveness is judged only after the judge has been connected for
// JudgeAfterIntervals: a worker silent because Redis was away is not
// killed; one still silent after that is.
func TestLivenessWaitsForAConnectedJudge(t *testing.T) {
	u := newUnit(t, func(c *Config) { c.ReplaceDead = false })
	u.worker(t, "w", "running", u.now().Add(-time.Hour))
	h := parts{u.s}.health()
	h.probes, h.judged = map[string]*healthState{}, map[string]bool{}
	h.upSince = u.now() // connected just now (after an outage)
	healthCheck(t, h, "w")
	if !u.d.Has(ContainerName("w")) || len(h.judged) != 0 {
		t.Fatal("judged dead right after the judge reconnected")
	}
	u.advance(JudgeAfterIntervals * u.s.cfg.HeartbeatInterval)
	healthCheck(t, h, "w")
	if !h.judged["w"] {
		t.Fatal("a worker silent for the whole judging window was not judged dead")
	}
	testkit.Eventually(t, "the container of w removed", 5*time.Second, func() bool { return !u.d.Has(ContainerName("w")) })
	// A paused worker is never judged.
	u.worker(t, "p", "paused", u.now().Add(-time.Hour))
	healthCheck(t, h, "p")
	if h.judged["p"] {
		t.Fatal("a paused worker was judged")
	}
}

// A worker that keeps dying before it completes a task is replaced at
// most MaxReplacements times, then its spec is marked failed.
func TestReplacementIsCapped(t *testing.T) {
	u := newUnit(t, func(c *Config) { c.MaxReplacements = 2; c.ReplaceBackoff = time.Millisecond })
	ctx := context.Background()
	u.worker(t, "w", "running", u.now())
	u.rc.HSet(ctx, u.keys.Status("w"), protocol.StatusFieldSpec, `{"agent_type":"claude"}`, protocol.StatusFieldReplacements, 2)
	u.task(t, "w", "waiting", false)
	if _, err := u.s.retire(ctx, "w", retirement{reason: protocol.RemovedDead, died: true, code: protocol.CodeKilled, msg: "x", replace: true}); err != nil {
		t.Fatal(err)
	}
	if by := u.rc.HGet(ctx, u.keys.Status("w"), protocol.StatusFieldReplacedBy).Val(); by != "" {
		t.Fatalf("replaced by %s past the cap", by)
	}
	if o := u.outputs(t, "w")["waiting"]; o.Error == nil || o.Error.Code != protocol.CodeKilled {
		t.Fatalf("the waiting task: %+v", o)
	}
	if n := countLifecycle(t, u, "w", protocol.EventReplaceFailed); n != 1 {
		t.Fatalf("%d replace_failed events", n)
	}
}

func countLifecycle(t *testing.T, u *unit, id string, ev protocol.Event) int {
	t.Helper()
	msgs, _ := u.rc.XRange(context.Background(), u.keys.Lifecycle(), "-", "+").Result()
	n := 0
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if l, err := protocol.DecodeLifecycle(data); err == nil && l.WorkerID == id && l.Event == ev {
			n++
		}
	}
	return n
}

// healthCheck runs one health check of a worker, its status and
// heartbeat read as the loop reads them.
func healthCheck(t *testing.T, h *Health, id string) {
	t.Helper()
	ctx := context.Background()
	sts, beats, err := h.rdb.StatusFields(ctx, []string{id}, healthFields, true)
	if err != nil {
		t.Fatal(err)
	}
	h.check(ctx, id, sts[0], beats[0])
}

// A worker that says it is shutting down removes its heartbeat as it
// exits: that is no death, and it is not replaced.
func TestAWorkerShuttingDownIsNotJudgedDead(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	u.worker(t, "w", "running", u.now().Add(-time.Hour))
	u.rc.HSet(ctx, u.keys.Status("w"), protocol.StatusFieldState, string(protocol.WorkerStopping), protocol.StatusFieldUpdatedAt, protocol.FormatTime(u.now()))
	h := parts{u.s}.health()
	h.probes, h.judged, h.upSince = map[string]*healthState{}, map[string]bool{}, u.now().Add(-time.Hour)
	healthCheck(t, h, "w")
	if h.judged["w"] {
		t.Fatal("a worker shutting down was judged dead")
	}
	u.advance(u.s.cfg.StopTimeout + 10*time.Second) // stuck in stopping past the stop timeout
	h.upSince = u.now().Add(-time.Hour)
	healthCheck(t, h, "w")
	if !h.judged["w"] {
		t.Fatal("a worker stuck in stopping past the stop timeout was not judged")
	}
}

func TestLimitsAreChecked(t *testing.T) {
	u := newUnit(t, nil)
	ctx := context.Background()
	_, err := u.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Limits: protocol.Limits{CPUs: 64}})
	if ProtocolError(err).Code != protocol.CodeInvalidCommand {
		t.Fatalf("64 cores on a 2-core engine: %v, want INVALID_COMMAND", err)
	}
	_, err = u.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Limits: protocol.Limits{Memory: "0"}})
	if ProtocolError(err).Code != protocol.CodeInvalidCommand {
		t.Fatalf("memory 0: %v, want INVALID_COMMAND", err)
	}
}

// noContainers is an engine whose instances cannot run containers of
// their own (as Kubernetes's cannot), over one whose can.
type noContainers struct{ engine.Engine }

func (noContainers) RunsContainers() bool { return false }

// On such an engine a create with DOCKER is refused INVALID_COMMAND
// before anything is made; one without DOCKER is not.
func TestDockerRefusedWhereTheEngineRunsNoContainers(t *testing.T) {
	u := newUnit(t, nil)
	s := New(u.s.cfg, noContainers{u.s.engine}, u.rc, nil, u.s.log)
	ctx := context.Background()
	_, err := s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, Capabilities: []protocol.Capability{protocol.CapDocker}})
	if ProtocolError(err).Code != protocol.CodeInvalidCommand || !errors.Is(err, ErrNoDockerEngine) {
		t.Fatalf("DOCKER on an engine without containers: %v, want INVALID_COMMAND and ErrNoDockerEngine", err)
	}
	if cs, _ := u.d.ContainerList(ctx, container.ListOptions{All: true}); len(cs) != 0 {
		t.Fatalf("%d containers made", len(cs))
	}
	if !u.s.engine.RunsContainers() {
		t.Fatal("the Docker engine says its instances cannot run containers")
	}
}
