package spawner

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// MaxAttempts is how many workers a developer-queue task is handed to
// before it fails for good.
const MaxAttempts = 3

// watchEvents follows the engine's events for this spawner's containers
// and keeps the status hashes right; a worker that dies with a task in
// flight gets its crash forwarded. When the event stream breaks (an engine
// restart), it reconnects and reconciles with the container list, so that
// what happened meanwhile is not lost in effect.
func (s *Spawner) watchEvents(ctx context.Context) {
	for ctx.Err() == nil {
		since := time.Now()
		s.reconcileExited(ctx)
		f := s.managedFilter()
		f.Add("type", string(events.ContainerEventType))
		msgs, errs := s.docker.Events(ctx, events.ListOptions{Filters: f, Since: strconv.FormatInt(since.Unix(), 10)})
		oom := map[string]bool{}
	read:
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errs:
				if ctx.Err() == nil {
					s.log.Warn("engine event stream broke; reconnecting", "err", err)
					time.Sleep(time.Second)
				}
				break read
			case m := <-msgs:
				id := m.Actor.Attributes[protocol.LabelWorkerID]
				if id == "" {
					continue
				}
				switch m.Action {
				case events.ActionOOM:
					oom[id] = true
					s.lifecycle(ctx, id, protocol.EventOOM, nil)
				case events.ActionDie:
					code, _ := strconv.Atoi(m.Actor.Attributes["exitCode"])
					s.died(ctx, id, m.Actor.ID, code, oom[id])
					delete(oom, id)
				case events.ActionPause:
					s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerPaused)})
				case events.ActionUnPause:
					s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning)})
				}
			}
		}
	}
}

// reconcileExited treats every exited container of this spawner that is
// still in the workers set as having died now (events missed while the
// stream was down).
func (s *Spawner) reconcileExited(ctx context.Context) {
	f := s.managedFilter()
	f.Add("status", "exited")
	cs, err := s.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return
	}
	for _, c := range cs {
		id := c.Labels[protocol.LabelWorkerID]
		if id == "" || !s.rdb.SIsMember(ctx, s.keys.Workers(), id).Val() {
			continue
		}
		insp, err := s.docker.ContainerInspect(ctx, c.ID)
		if err != nil {
			continue
		}
		s.died(ctx, id, c.ID, insp.State.ExitCode, insp.State.OOMKilled)
	}
}

// classify says why a container ended. 137 alone is no proof of OOM: only
// an oom event or the engine's OOMKilled flag is.
func classify(exitCode int, oom bool) (protocol.Code, string) {
	switch {
	case oom:
		return protocol.CodeOOMKilled, fmt.Sprintf("the container was killed by the OOM killer (exit code %d)", exitCode)
	case exitCode == 137:
		return protocol.CodeKilled, "the container was killed (SIGKILL, exit code 137)"
	case exitCode == 143:
		return protocol.CodeTerminated, "the container was terminated (SIGTERM, exit code 143)"
	case exitCode == 0:
		return protocol.CodeAgentCrashed, "the worker exited (exit code 0) with a task in flight"
	}
	return protocol.CodeAgentCrashed, fmt.Sprintf("the worker crashed (exit code %d)", exitCode)
}

// died records a worker's end, forwards its task in flight (a failed
// Output on the task's stream; a developer-queue task goes back to the
// queue for another worker, up to MaxAttempts), and removes its container.
func (s *Spawner) died(ctx context.Context, id, containerID string, exitCode int, oom bool) {
	code, msg := classify(exitCode, oom)
	s.diedAs(ctx, id, containerID, exitCode, oom, code, msg)
}

// diedAs is died with the cause given.
func (s *Spawner) diedAs(ctx context.Context, id, containerID string, exitCode int, oom bool, code protocol.Code, msg string) {
	if !s.rdb.SIsMember(ctx, s.keys.Workers(), id).Val() {
		return // removed on purpose (Delete), or already handled
	}
	h, _ := s.rdb.HGetAll(ctx, s.keys.Status(id)).Result()
	state := protocol.WorkerFailed
	if exitCode == 0 && h[protocol.StatusFieldRequestID] == "" {
		state = protocol.WorkerStopped
	}
	s.writeStatus(ctx, id, map[string]any{protocol.StatusFieldState: string(state), protocol.StatusFieldContainer: string(protocol.ContainerFailed),
		protocol.StatusFieldExitCode: exitCode, protocol.StatusFieldError: string(code) + ": " + msg})
	s.lifecycle(ctx, id, protocol.EventDied, map[string]any{"exit_code": exitCode, "oom": oom, "code": code})
	// Its task in flight, and the tasks it had read but not yet announced
	// (it died before its status said so): no task stays unanswered.
	s.forwardHeld(ctx, id, h, code, msg)
	s.rdb.SRem(ctx, s.keys.Workers(), id)
	if containerID != "" {
		_ = s.docker.ContainerRemove(context.WithoutCancel(ctx), containerID, container.RemoveOptions{Force: true})
	}
	s.log.Warn("worker died", "worker_id", id, "exit_code", exitCode, "oom", oom, "code", code, "request_id", h[protocol.StatusFieldRequestID])
}

// forwardScript publishes a crash's failed output and marks the run
// failed, unless the run is already terminal (the wrapper published its
// own output before it died); it acknowledges the task's entry.
// KEYS: run hash, output stream, input stream; ARGV: group, entry id
// ("" for none), output doc, run error, finished_at.
var forwardScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'completed' or st == 'failed' then return 0 end
redis.call('XADD', KEYS[2], '*', 'data', ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'failed', 'error', ARGV[4], 'finished_at', ARGV[5], 'updated_at', ARGV[5])
if ARGV[2] ~= '' then redis.call('XACK', KEYS[3], ARGV[1], ARGV[2]) end
return 1
`)

// requeueScript hands a developer task to another worker: the entry is
// added again to the queue and the dead one acknowledged, unless the run
// finished meanwhile. KEYS: run hash, input stream; ARGV: group, entry id,
// the task document. Returns the new attempt, or 0.
var requeueScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'completed' or st == 'failed' then return 0 end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('XADD', KEYS[2], '*', 'data', ARGV[3])
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
return n + 1
`)

// forward answers one task of a dead worker; h is the worker's status
// hash with the task's fields, entry the task's pending entry (zero when
// none is pending).
func (s *Spawner) forward(ctx context.Context, id string, h map[string]string, entry redis.XMessage, code protocol.Code, msg string) {
	req := h[protocol.StatusFieldRequestID]
	kind, input, group := s.inputOf(id, h)
	attempt, _ := strconv.Atoi(h[protocol.StatusFieldAttempt])
	if kind == protocol.KindDeveloper && entry.ID != "" && code.Retryable() {
		attempts, _ := s.rdb.HGet(ctx, s.keys.Run(req), "attempts").Int()
		if attempts+1 < MaxAttempts {
			data, _ := protocol.EntryData(entry.Values)
			n, err := requeueScript.Run(ctx, s.rdb, []string{s.keys.Run(req), input}, group, entry.ID, string(data)).Int()
			if err == nil && n > 0 {
				s.log.Info("developer task handed to another worker", "request_id", req, "attempt", n, "code", code)
				return
			}
		}
		attempt = attempts + 1
	}
	started, _ := protocol.ParseTime(h[protocol.StatusFieldTaskStarted])
	o := protocol.Output{RequestID: req, TaskID: h[protocol.StatusFieldTaskID], ProjectID: h[protocol.StatusFieldProjectID],
		WorkerID: id, AgentType: protocol.AgentType(h[protocol.StatusFieldAgentType]), Status: protocol.StatusFailed,
		Error: protocol.NewError(code, "%s", msg), Attempt: attempt, Timestamp: s.now()}
	if !started.IsZero() {
		o.DurationMS = s.now().Sub(started).Milliseconds()
	}
	if !o.AgentType.Valid() {
		o.AgentType = ""
	}
	doc, err := o.Encode()
	if err != nil {
		return
	}
	out := h[protocol.StatusFieldOutputStream]
	if out == "" {
		out = s.keys.OutputFor(kind, id)
	}
	now := protocol.FormatTime(s.now())
	if _, err := forwardScript.Run(ctx, s.rdb, []string{s.keys.Run(req), out, input}, group, entry.ID, string(doc),
		string(code)+": "+msg, now).Result(); err != nil {
		s.log.Warn("crash not forwarded", "worker_id", id, "request_id", req, "err", err)
	}
}

// forwardHeld answers the tasks a dead worker held: the one its status
// names, then every other entry delivered to it and never acknowledged.
func (s *Spawner) forwardHeld(ctx context.Context, id string, h map[string]string, code protocol.Code, msg string) {
	_, input, group := s.inputOf(id, h)
	inFlight := h[protocol.StatusFieldRequestID]
	var inFlightEntry redis.XMessage
	var others []pendingTask
	for _, p := range s.pendingTasks(ctx, input, group, id) {
		switch {
		case !p.ok:
		case p.task.RequestID == inFlight:
			inFlightEntry = p.msg
		default:
			others = append(others, p)
		}
	}
	if inFlight != "" {
		s.forward(ctx, id, h, inFlightEntry, code, msg)
	}
	for _, p := range others {
		t := p.task
		hh := maps.Clone(h)
		hh[protocol.StatusFieldRequestID], hh[protocol.StatusFieldTaskID], hh[protocol.StatusFieldProjectID] = t.RequestID, t.TaskID, t.Project()
		hh[protocol.StatusFieldTaskStarted], hh[protocol.StatusFieldOutputStream] = "", ""
		s.forward(ctx, id, hh, p.msg, code, msg)
	}
}

// inputOf returns a worker's kind (long-lived when its hash says none),
// its input stream and that stream's consumer group.
func (s *Spawner) inputOf(id string, h map[string]string) (protocol.Kind, string, string) {
	kind := protocol.Kind(h[protocol.StatusFieldKind])
	if kind == "" {
		kind = protocol.KindLongLived
	}
	return kind, s.keys.InputFor(kind, id), protocol.GroupFor(kind)
}

// pendingTask is an entry a consumer holds pending, with its task (the
// zero Task when the entry does not decode as one).
type pendingTask struct {
	msg  redis.XMessage
	task protocol.Task
	ok   bool
}

// pendingTasks returns the entries (up to 100) consumer holds pending on
// stream in group, oldest first.
func (s *Spawner) pendingTasks(ctx context.Context, stream, group, consumer string) []pendingTask {
	pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 100, Consumer: consumer}).Result()
	if err != nil {
		return nil
	}
	var out []pendingTask
	for _, p := range pend {
		msgs, err := s.rdb.XRangeN(ctx, stream, p.ID, p.ID, 1).Result()
		if err != nil || len(msgs) == 0 {
			continue
		}
		data, _ := protocol.EntryData(msgs[0].Values)
		t, err := protocol.DecodeTask(data)
		out = append(out, pendingTask{msg: msgs[0], task: t, ok: err == nil})
	}
	return out
}
