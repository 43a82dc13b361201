package spawner

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/docker/docker/api/types/container"

	"github.com/agentvisor/agentvisor/protocol"
)

// monitor checks every worker every quarter heartbeat interval:
//   - running (not paused), started more than three intervals ago, and its
//     heartbeat key expired: dead — recorded, its task forwarded, removed
//     (detection within two intervals of the expiry);
//   - idle longer than IdleTimeout: paused;
//   - paused longer than PauseTimeout: terminated.
//
// A paused worker cannot beat, and is never declared dead for it.
func (s *Spawner) monitor(ctx context.Context) {
	s.health = map[string]*healthState{}
	s.everyWorker(ctx, max(s.cfg.HeartbeatInterval/4, 100*time.Millisecond), s.check)
}

func (s *Spawner) check(ctx context.Context, id string) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Status(id)).Result()
	if err != nil || len(h) == 0 {
		return
	}
	now := s.now()
	updated, _ := protocol.ParseTime(h[protocol.StatusFieldUpdatedAt])
	created, _ := protocol.ParseTime(h[protocol.StatusFieldCreatedAt])
	switch protocol.ContainerStatus(h[protocol.StatusFieldContainer]) {
	case protocol.ContainerPaused:
		if !updated.IsZero() && now.Sub(updated) > s.cfg.PauseTimeout {
			s.log.Info("paused past the pause timeout: terminating", "worker_id", id)
			s.lifecycle(ctx, id, protocol.EventStopping, map[string]any{"reason": "pause_timeout"})
			if err := s.Delete(ctx, id); err != nil && !IsNotFound(err) {
				s.log.Warn("terminate after pause timeout", "worker_id", id, "err", err)
			}
		}
	case protocol.ContainerRunning:
		hb, err := s.rdb.Get(ctx, s.keys.Heartbeat(id)).Bytes()
		if err != nil && !errors.Is(err, redis.Nil) {
			return
		}
		if len(hb) == 0 && (created.IsZero() || now.Sub(created) < 3*s.cfg.HeartbeatInterval) {
			return // still starting: no heartbeat yet
		}
		if len(hb) == 0 {
			delete(s.health, id)
			s.dead(ctx, id)
			return
		}
		s.probe(ctx, id, hb, now)
		if h[protocol.StatusFieldState] == string(protocol.WorkerIdle) && !updated.IsZero() && now.Sub(updated) > s.cfg.IdleTimeout && !s.hasInput(ctx, id) {
			s.log.Info("idle past the idle timeout: pausing", "worker_id", id)
			if err := s.Pause(ctx, id); err != nil && !IsNotFound(err) {
				s.log.Warn("pause after idle timeout", "worker_id", id, "err", err)
			}
		}
	}
}

// DegradedAfter is how many failed health probes in a row make a worker
// degraded.
const DegradedAfter = 3

// healthState is one worker's probe record, owned by the monitor.
type healthState struct {
	machine  *protocol.WorkerMachine
	failures int
}

// probe checks a running worker's heartbeat: one older than one and a half
// intervals is a failed probe. DegradedAfter failures in a row make the
// worker degraded; a fresh beat makes it healthy again. Each change is
// recorded through the protocol's worker state machine and published.
func (s *Spawner) probe(ctx context.Context, id string, doc []byte, now time.Time) {
	st := s.health[id]
	if st == nil {
		st = &healthState{machine: protocol.NewWorkerMachine(id, now)}
		st.machine.State = protocol.WorkerIdle
		s.health[id] = st
	}
	hb, err := protocol.DecodeHeartbeat(doc)
	fresh := err == nil && now.Sub(hb.Timestamp) <= s.cfg.HeartbeatInterval*3/2
	if fresh {
		st.failures = 0
		if tr, changed, _ := st.machine.SetHealth(protocol.HealthHealthy, "heartbeat fresh again", now); changed {
			s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldHealth: string(protocol.HealthHealthy)})
			s.lifecycle(ctx, id, protocol.EventRecovered, map[string]any{"degraded_for_ms": tr.InPrevious.Milliseconds()})
		}
		return
	}
	st.failures++
	if st.failures < DegradedAfter {
		return
	}
	reason := "heartbeat stale"
	if err != nil {
		reason = "heartbeat unreadable: " + err.Error()
	}
	if _, changed, _ := st.machine.SetHealth(protocol.HealthDegraded, reason, now); changed {
		s.log.Warn("worker degraded", "worker_id", id, "failures", st.failures, "reason", reason)
		s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldHealth: string(protocol.HealthDegraded)})
		s.lifecycle(ctx, id, protocol.EventDegraded, map[string]any{"failures": st.failures, "reason": reason})
	}
}

// dead handles a running worker whose heartbeat expired: it is killed and
// treated as having died (its task forwarded).
func (s *Spawner) dead(ctx context.Context, id string) {
	c, err := s.find(ctx, id)
	if err != nil {
		return
	}
	s.log.Warn("heartbeat expired: the worker is dead", "worker_id", id)
	s.lifecycle(ctx, id, protocol.EventDead, map[string]any{"heartbeat_interval": s.cfg.HeartbeatInterval.String()})
	h, _ := s.rdb.HGetAll(ctx, s.keys.Status(id)).Result()
	spec := h[protocol.StatusFieldSpec]
	replacing := s.cfg.ReplaceDead && spec != "" && protocol.Kind(h[protocol.StatusFieldKind]) != protocol.KindDeveloper
	if replacing {
		// Tasks it had read but never started go to its replacement rather
		// than fail: put back, undelivered, before its death is handled
		// (here or by the events loop), for replace to move.
		s.putBackUnstarted(ctx, id, h[protocol.StatusFieldRequestID])
	}
	_ = s.docker.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true})
	code := 137
	if c.State != nil && c.State.ExitCode != 0 {
		code = c.State.ExitCode
	}
	s.died(ctx, id, c.ID, code, false)
	if replacing {
		go s.replace(context.WithoutCancel(ctx), id, spec)
	}
}

// putBackUnstarted re-adds, undelivered, the entries a dead long-lived
// worker had read (pending in its group) except the task in flight, and
// acknowledges the read copies.
func (s *Spawner) putBackUnstarted(ctx context.Context, id, inFlight string) {
	input := s.keys.Input(id)
	for _, p := range s.pendingTasks(ctx, input, protocol.WorkerGroup, id) {
		if p.ok && p.task.RequestID == inFlight {
			continue
		}
		if err := s.moveEntry(ctx, input, input, p.msg, protocol.WorkerGroup); err != nil {
			s.log.Warn("put back an unstarted task", "worker_id", id, "entry", p.msg.ID, "err", err)
		}
	}
}

// moveEntry adds m to the stream to and deletes it from from
// (acknowledging it in ackGroup first, when given), in one transaction.
func (s *Spawner) moveEntry(ctx context.Context, from, to string, m redis.XMessage, ackGroup string) error {
	pipe := s.rdb.TxPipeline()
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: to, Values: m.Values})
	if ackGroup != "" {
		pipe.XAck(ctx, from, ackGroup, m.ID)
	}
	pipe.XDel(ctx, from, m.ID)
	_, err := pipe.Exec(ctx)
	return err
}

// replace creates a worker of the dead long-lived worker's spec, records
// which replaced which (both status hashes, and the old worker's removed
// event), and moves the tasks still waiting on the old input (never
// delivered) to the new one.
func (s *Spawner) replace(ctx context.Context, oldID, rawSpec string) {
	var spec protocol.WorkerSpec
	if err := json.Unmarshal([]byte(rawSpec), &spec); err != nil {
		s.log.Warn("replace a dead worker: unreadable spec", "worker_id", oldID, "err", err)
		return
	}
	// The command id makes a second attempt (another manager, a restart)
	// find this replacement instead of making another.
	info, err := s.CreateFor(ctx, "replace-"+oldID, spec)
	if err != nil {
		s.log.Warn("replace a dead worker", "worker_id", oldID, "err", err)
		return
	}
	s.writeStatus(ctx, oldID, map[string]any{protocol.StatusFieldReplacedBy: info.WorkerID})
	s.writeStatus(ctx, info.WorkerID, map[string]any{protocol.StatusFieldReplaces: oldID})
	moved := s.moveWaiting(ctx, s.keys.Input(oldID), s.keys.Input(info.WorkerID))
	s.lifecycle(ctx, oldID, protocol.EventRemoved, map[string]any{"replaced_by": info.WorkerID, "tasks_moved": moved})
	s.log.Info("dead worker replaced", "worker_id", oldID, "replacement", info.WorkerID, "tasks_moved", moved)
}

// moveWaiting moves the entries of from that its wrapper group never
// delivered to the stream to, and returns how many.
func (s *Spawner) moveWaiting(ctx context.Context, from, to string) int {
	last := "0-0"
	if groups, err := s.rdb.XInfoGroups(ctx, from).Result(); err == nil {
		for _, g := range groups {
			if g.Name == protocol.WorkerGroup {
				last = g.LastDeliveredID
			}
		}
	}
	msgs, err := s.rdb.XRange(ctx, from, "("+last, "+").Result()
	if err != nil {
		return 0
	}
	n := 0
	for _, m := range msgs {
		if err := s.moveEntry(ctx, from, to, m, ""); err != nil {
			s.log.Warn("move a waiting task", "from", from, "to", to, "err", err)
			return n
		}
		n++
	}
	return n
}

// ReconcileReport counts what one reconciliation fixed.
type ReconcileReport struct {
	OrphansRemoved int // labelled containers Redis does not know
	MissingMarked  int // Redis workers whose container is gone
	StatesFixed    int // status hashes that disagreed with the engine
	ContainersSeen int
	WorkersKnown   int
}

// Reconcile makes Redis and the engine agree: it removes containers of this
// key prefix that Redis does not know (past CreationGrace), marks Redis
// workers whose container is gone, and fixes statuses that disagree.
func (s *Spawner) Reconcile(ctx context.Context) (ReconcileReport, error) {
	var rep ReconcileReport
	cs, err := s.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: s.managedFilter()})
	if err != nil {
		return rep, &Error{protocol.CodeUpstreamUnavailable, err}
	}
	known, err := s.rdb.SMembers(ctx, s.keys.Workers()).Result()
	if err != nil {
		return rep, &Error{protocol.CodeUpstreamUnavailable, err}
	}
	rep.ContainersSeen, rep.WorkersKnown = len(cs), len(known)
	inRedis := map[string]bool{}
	for _, id := range known {
		inRedis[id] = true
	}
	withContainer := map[string]bool{}
	now := s.now()
	for _, c := range cs {
		id := c.Labels[protocol.LabelWorkerID]
		withContainer[id] = true
		if inRedis[id] {
			want := protocol.ContainerRunning
			if c.State == "paused" {
				want = protocol.ContainerPaused
			}
			if c.State == "running" || c.State == "paused" {
				if got := s.rdb.HGet(ctx, s.keys.Status(id), protocol.StatusFieldContainer).Val(); got != string(want) {
					s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(want)})
					rep.StatesFixed++
				}
			}
			continue
		}
		created, _ := protocol.ParseTime(c.Labels[protocol.LabelCreatedAt])
		if created.IsZero() {
			created = time.Unix(c.Created, 0)
		}
		if now.Sub(created) < s.cfg.CreationGrace {
			continue
		}
		if err := s.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err == nil {
			rep.OrphansRemoved++
			s.log.Info("orphan container removed", "container_id", c.ID, "worker_id", id)
		}
	}
	for _, id := range known {
		if withContainer[id] {
			continue
		}
		// Gone without the manager seeing it die (removed while no manager
		// watched): a death all the same, its tasks answered.
		s.diedAs(ctx, id, "", -1, false, protocol.CodeKilled, "the worker's container is gone (removed while no manager watched)")
		s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerStopped),
			protocol.StatusFieldState: string(protocol.WorkerFailed), protocol.StatusFieldError: "container gone"})
		rep.MissingMarked++
	}
	s.log.Info("reconciled", "orphans_removed", rep.OrphansRemoved, "missing_marked", rep.MissingMarked,
		"states_fixed", rep.StatesFixed, "containers", rep.ContainersSeen)
	return rep, nil
}

func (s *Spawner) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		if _, err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("reconcile", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
