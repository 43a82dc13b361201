package spawner

import (
	"context"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// DegradedAfter is how many failed health probes in a row make a worker
// degraded.
const DegradedAfter = 3

// JudgeAfterIntervals is how long, in heartbeat intervals, the judging
// manager must have been connected to Redis without a break before a
// missing heartbeat counts: the silence that kills a worker at any other
// time (its key's TTL), counted from Redis's return, so a live worker
// slow to reconnect (its pool's dead connections, a loaded host, its
// Redis user made again) has as long to beat as ever.
const JudgeAfterIntervals = protocol.HeartbeatTTLIntervals

// Health checks every running worker every quarter heartbeat interval. A
// heartbeat older than one and a half intervals is a failed probe;
// DegradedAfter failures make the worker degraded, a fresh beat healthy
// again. A worker whose heartbeat key expired (3 intervals), started more
// than 3 intervals ago, is dead: retired, its tasks answered, and (long-
// lived with a spec) replaced. Liveness is judged only while this manager
// has been connected to Redis for JudgeAfterIntervals: an outage kills no
// healthy worker. A paused worker cannot beat and is never judged. It
// runs on the leader.
type Health struct {
	job
	healthParams

	// Owned by the loop's goroutine.
	probes  map[string]*healthState
	judged  map[string]bool // found dead, retirement under way
	upSince time.Time       // since when every read of the loop succeeded; zero while failing
	users   time.Time       // when the worker users were last checked
	retires sync.WaitGroup  // retirements begun by dead
	// replacing holds the degraded workers whose retirement is under way;
	// one that fails leaves, to be tried again at the next round.
	replacing sync.Map
	// incarnation is the incarnated_at each worker was last seen with: a
	// new incarnation is judged afresh.
	incarnation map[string]string
	// running is when this judge first saw each worker's container
	// running: a container whose start was slow (the engine answering
	// late) has its wrapper's first beat to come however old its create.
	running map[string]time.Time
}

// healthParams is what Health is built from.
type healthParams struct {
	*env
	workers     retirer
	interval    time.Duration // the workers' heartbeat interval
	stopTimeout time.Duration // how long a stopping worker may go without beating
	// replaceDegradedAfter: a worker idle and degraded this long is
	// retired and replaced (0: never).
	replaceDegradedAfter time.Duration
	obs                  *observer // each round's duration
	// restoreUsers makes again the worker users Redis lost (ACL mode);
	// connected signals a new connection to Redis.
	restoreUsers func(ctx context.Context) (int, error)
	connected    <-chan struct{}
}

func newHealth(p healthParams) *Health { return &Health{healthParams: p} }

// healthState is one worker's probe record.
type healthState struct {
	machine  *protocol.WorkerMachine
	failures int
}

// Start checks until Stop.
func (h *Health) Start(ctx context.Context) { h.start(ctx, h.run) }

// Stop stops checking and waits for the retirements it began.
func (h *Health) Stop() {
	h.job.Stop()
	h.retires.Wait()
}

func (h *Health) run(ctx context.Context) {
	h.probes, h.judged, h.upSince = map[string]*healthState{}, map[string]bool{}, time.Time{}
	every(ctx, max(h.interval/4, 100*time.Millisecond), func(ctx context.Context) {
		if err := h.rdb.Ping(ctx); err != nil {
			h.upSince = time.Time{}
			return
		}
		if h.upSince.IsZero() {
			h.upSince = h.now()
		}
		reconnected := false
		select {
		case <-h.connected:
			reconnected = true
		default:
		}
		if reconnected || h.now().Sub(h.users) >= h.interval/2 {
			// A Redis that restarted, or a replica promoted by a failover,
			// lacks the worker users (they are neither in the append-only
			// file nor replicated): they come back before anyone is
			// judged, and since the workers could not authenticate until
			// now, judging waits as after an outage.
			h.users = h.now()
			if n, err := h.restoreUsers(ctx); err == nil && n > 0 {
				h.upSince = h.now()
				h.log.Warn("worker Redis users made again (Redis lost them: a restart or a failover)", "users", n, "on_new_connection", reconnected)
			}
		}
		// One round trip for the members, one for what is read of each.
		round := time.Now()
		ids, err := h.ownWorkers(ctx)
		if err != nil {
			h.upSince = time.Time{}
			return
		}
		sts, beats, err := h.rdb.StatusFields(ctx, ids, healthFields, true)
		if err != nil {
			h.upSince = time.Time{}
			return
		}
		seen := map[string]bool{}
		for i, id := range ids {
			seen[id] = true
			h.check(ctx, id, sts[i], beats[i])
		}
		h.obs.healthChecked(time.Since(round))
		for id := range h.probes {
			if !seen[id] {
				delete(h.probes, id) // retired
			}
		}
		for id := range h.judged {
			if !seen[id] {
				delete(h.judged, id)
			}
		}
		for id := range h.incarnation {
			if !seen[id] {
				delete(h.incarnation, id)
			}
		}
		for id := range h.running {
			if !seen[id] {
				delete(h.running, id)
			}
		}
	})
}

// canJudge reports whether a missing heartbeat may count now.
func (h *Health) canJudge() bool {
	return !h.upSince.IsZero() && h.now().Sub(h.upSince) >= JudgeAfterIntervals*h.interval
}

// healthFields are the fields of a worker's status hash that check reads.
var healthFields = []string{protocol.StatusFieldContainer, protocol.StatusFieldState, protocol.StatusFieldUpdatedAt, protocol.StatusFieldCreatedAt, protocol.StatusFieldIncarnatedAt,
	protocol.StatusFieldHealth, protocol.StatusFieldStateSince, protocol.StatusFieldRequestID}

// check judges one worker from its status fields (healthFields) and its
// heartbeat document (nil: expired), read together.
func (h *Health) check(ctx context.Context, id string, st map[string]string, hb []byte) {
	if inc := st[protocol.StatusFieldIncarnatedAt]; h.incarnation[id] != inc {
		if h.incarnation == nil {
			h.incarnation = map[string]string{}
		}
		h.incarnation[id] = inc
		delete(h.judged, id)
		delete(h.probes, id)
		delete(h.running, id)
	}
	now := h.now()
	if st[protocol.StatusFieldContainer] != string(protocol.ContainerRunning) {
		delete(h.running, id)
		return // starting, paused or ended: not judged
	}
	if h.running == nil {
		h.running = map[string]time.Time{}
	}
	if _, seen := h.running[id]; !seen {
		h.running[id] = now
	}
	if hb == nil {
		if ending(st, now, h.stopTimeout) {
			return // shutting down: its exit is the crash watcher's
		}
		created, _ := protocol.ParseTime(st[protocol.StatusFieldCreatedAt])
		if inc, err := protocol.ParseTime(st[protocol.StatusFieldIncarnatedAt]); err == nil && inc.After(created) {
			created = inc // a new incarnation starts as a create does
		}
		ttl := protocol.HeartbeatTTLIntervals * h.interval
		if created.IsZero() || now.Sub(created) < ttl || now.Sub(h.running[id]) < ttl || !h.canJudge() {
			return // still starting, or this manager cannot tell yet
		}
		delete(h.probes, id)
		if !h.judged[id] {
			h.judged[id] = true
			h.dead(ctx, id)
		}
		return
	}
	h.probe(ctx, id, hb, now)
	h.degradedTooLong(ctx, id, st, now)
}

// degradedTooLong retires and replaces a worker that beats but that its
// own tasks left degraded (its agent failing or crashing task after task)
// and that has been idle so since replaceDegradedAfter: a degraded worker
// takes no shared task, so nothing else would end that state.
func (h *Health) degradedTooLong(ctx context.Context, id string, st map[string]string, now time.Time) {
	if _, busy := h.replacing.Load(id); busy {
		return
	}
	if h.replaceDegradedAfter <= 0 || h.judged[id] || st[protocol.StatusFieldHealth] != string(protocol.HealthDegraded) ||
		st[protocol.StatusFieldState] != string(protocol.WorkerIdle) || st[protocol.StatusFieldRequestID] != "" {
		return
	}
	if p := h.probes[id]; p != nil && p.failures > 0 {
		return // the probes' own degradation: the heartbeat's expiry judges it
	}
	since, err := protocol.ParseTime(st[protocol.StatusFieldStateSince])
	if err != nil || now.Sub(since) < h.replaceDegradedAfter {
		return
	}
	h.replacing.Store(id, true)
	h.log.Warn("degraded and idle too long: the worker is replaced", "worker_id", id, "degraded_for", now.Sub(since).String())
	h.retires.Add(1)
	go func() {
		defer h.retires.Done()
		if _, err := h.workers.retire(ctx, id, retirement{reason: protocol.RemovedDegraded, graceful: true, code: protocol.CodeTerminated,
			msg: "the worker stayed degraded: it was replaced", replace: true, unasked: true}); err != nil {
			h.log.Warn("retire a degraded worker", "worker_id", id, "err", err)
		}
		h.replacing.Delete(id) // done (its next incarnation is judged afresh), or to be tried again
	}()
}

// probe records one health probe of a running worker, through the
// protocol's worker state machine; each change is published.
func (h *Health) probe(ctx context.Context, id string, doc []byte, now time.Time) {
	st := h.probes[id]
	if st == nil {
		st = &healthState{machine: protocol.NewWorkerMachine(id, now)}
		st.machine.State = protocol.WorkerIdle
		h.probes[id] = st
	}
	hb, err := protocol.DecodeHeartbeat(doc)
	fresh := err == nil && beatFresh(hb, now, h.interval)
	if fresh {
		st.failures = 0
		// The first fresh beat it sees makes the probe's record healthy
		// and writes nothing: the wrapper says healthy at its first
		// heartbeat, and may be degraded by its own tasks. Only a worker
		// the probes degraded is written back healthy.
		if tr, changed, _ := st.machine.SetHealth(protocol.HealthHealthy, "heartbeat fresh again", now); changed && tr.FromHealth == protocol.HealthDegraded {
			h.writeStatus(ctx, id, map[string]any{protocol.StatusFieldHealth: string(protocol.HealthHealthy)})
			h.lifecycle(ctx, id, protocol.EventRecovered, map[string]any{"degraded_for_ms": tr.InPrevious.Milliseconds()})
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
		h.log.Warn("worker degraded", "worker_id", id, "failures", st.failures, "reason", reason)
		h.writeStatus(ctx, id, map[string]any{protocol.StatusFieldHealth: string(protocol.HealthDegraded)})
		h.lifecycle(ctx, id, protocol.EventDegraded, map[string]any{"failures": st.failures, "reason": reason})
	}
}

// dead retires a running worker whose heartbeat expired: its container
// is killed, its tasks answered, and it is replaced.
func (h *Health) dead(ctx context.Context, id string) {
	h.log.Warn("heartbeat expired: the worker is dead", "worker_id", id)
	h.lifecycle(ctx, id, protocol.EventDead, map[string]any{"heartbeat_interval": h.interval.String()})
	h.retires.Add(1)
	go func() {
		defer h.retires.Done()
		// A replacement waits its backoff: the loop goes on meanwhile.
		if _, err := h.workers.retire(ctx, id, retirement{reason: protocol.RemovedDead, died: true, exitCode: 137, code: protocol.CodeKilled,
			msg: "the worker's heartbeat expired: it was killed", replace: true, unasked: true}); err != nil {
			h.log.Warn("retire a dead worker", "worker_id", id, "err", err)
		}
	}()
}

// ending reports whether a worker's wrapper said it is shutting down
// (stopping, or stopped) within the stop timeout: it removes its
// heartbeat as it exits, which is no death.
func ending(st map[string]string, now time.Time, stopTimeout time.Duration) bool {
	state := protocol.WorkerState(st[protocol.StatusFieldState])
	if state != protocol.WorkerStopping && state != protocol.WorkerStopped {
		return false
	}
	at, err := protocol.ParseTime(st[protocol.StatusFieldUpdatedAt])
	return err == nil && now.Sub(at) < stopTimeout+5*time.Second
}

// beatFresh reports whether a heartbeat is at most one and a half
// intervals old at now: a probe that passes (Health), a worker of a lost
// host still alive (HostWatch).
func beatFresh(hb protocol.Heartbeat, now time.Time, interval time.Duration) bool {
	return now.Sub(hb.Timestamp) <= interval*3/2
}
