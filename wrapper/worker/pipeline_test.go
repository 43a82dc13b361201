package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// blockedReader returns the client id of the worker's blocked XREADGROUP.
func (e *env) blockedReader() int64 {
	list, _ := e.rc.ClientList(context.Background()).Result()
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " cmd=xreadgroup") || !strings.Contains(line, " flags=b") {
			continue
		}
		var id int64
		if _, err := fmt.Sscanf(line, "id=%d", &id); err == nil {
			return id
		}
	}
	return 0
}

// A read whose reply is lost (the connection dropped after Redis delivered
// the entry) leaves the entry pending for this worker alone: after the read
// error the worker reads its own pending entries first, and runs it.
func TestLostReadReplyIsReadAgain(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	ctx := context.Background()
	id := e.cfg.WorkerID
	in := e.keys.Input(id)
	var reader int64
	testkit.Eventually(t, "the worker blocked in its read", 5*time.Second, func() bool { reader = e.blockedReader(); return reader != 0 })
	// Deliver an entry to the worker's consumer without the worker seeing
	// the reply, as a lost reply does, then drop its connection.
	doc, _ := protocol.Task{RequestID: "lost-reply", Prompt: "fake:complete"}.Encode()
	if _, err := e.rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: in, Values: protocol.Values(doc)})
		p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: protocol.WorkerGroup, Consumer: id, Streams: []string{in, ">"}, Count: 1, Block: -1})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.rc.ClientKillByFilter(ctx, "ID", fmt.Sprint(reader)).Err(); err != nil {
		t.Fatal(err)
	}
	outs := e.waitOutputs(e.keys.Output(id), 1, 5*time.Second)
	if outs[0].RequestID != "lost-reply" || outs[0].Status != protocol.StatusComplete {
		t.Fatalf("output %+v", outs[0])
	}
	if n, _ := e.rc.XPending(ctx, in, protocol.WorkerGroup).Result(); n.Count != 0 {
		t.Errorf("%d entries left pending", n.Count)
	}
}

// Redis refusing a write for good ends its retry: the task gets a failed
// output saying why, and the worker serves the next task. Refusals: the run
// key is not a hash (WRONGTYPE), before the task or while its agent runs;
// the worker's Redis user may not run scripts (NOPERM), so no script can
// be loaded again either.
func TestPermanentRedisErrorFailsTheTaskAndTheLoopGoesOn(t *testing.T) {
	wrongType := func(e *env) {
		ctx := context.Background()
		e.rc.Del(ctx, e.keys.Run("refused"))
		e.rc.Set(ctx, e.keys.Run("refused"), "not a hash", 0)
	}
	tests := []struct {
		name     string
		prompt   string
		setup    func(e *env) // before the worker starts
		during   func(e *env) // once the task is sent
		refusal  string
		nextDone protocol.OutputStatus // what the next task ends with
	}{
		{name: "run key of another type before the task", prompt: "fake:complete", setup: wrongType,
			refusal: "WRONGTYPE", nextDone: protocol.StatusComplete},
		{name: "run key of another type while the agent runs", prompt: "fake:sleep-600",
			during: func(e *env) {
				testkit.Eventually(e.t, "task start", 5*time.Second, func() bool {
					return strings.Contains(strings.Join(e.lifecycle(), ","), "task_started")
				})
				wrongType(e)
			},
			refusal: "WRONGTYPE", nextDone: protocol.StatusComplete},
		{name: "scripts not permitted", prompt: "fake:complete",
			setup: func(e *env) {
				if _, err := e.redis.Do("ACL", "SETUSER", "noscripts", "on", ">pw-noscripts", "~*", "&*", "+@all", "-eval", "-evalsha", "-script"); err != nil {
					e.t.Fatal(err)
				}
				e.cfg.RedisURL = "redis://noscripts:pw-noscripts@" + e.redis.Addr + "/0"
			},
			refusal: "NOPERM", nextDone: protocol.StatusFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
			if tt.setup != nil {
				tt.setup(e)
			}
			e.start()
			id := e.cfg.WorkerID
			in, out := e.keys.Input(id), e.keys.Output(id)
			e.send(in, protocol.Task{RequestID: "refused", Prompt: tt.prompt})
			if tt.during != nil {
				tt.during(e)
			}
			e.send(in, protocol.Task{RequestID: "next", Prompt: "fake:complete"})
			outs := e.waitOutputs(out, 2, 15*time.Second)
			if o := outs[0]; o.RequestID != "refused" || o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeInternalError ||
				!strings.Contains(o.Error.Message, tt.refusal) {
				t.Fatalf("refused task: %+v %+v", o, o.Error)
			}
			if o := outs[1]; o.RequestID != "next" || o.Status != tt.nextDone {
				t.Fatalf("next task: %+v %+v", o, o.Error)
			}
			if n, _ := e.rc.XPending(context.Background(), in, protocol.WorkerGroup).Result(); n.Count != 0 {
				t.Errorf("%d entries left pending", n.Count)
			}
		})
	}
}

// A task the spawner requeued (its run hash says running, with one
// hand-over counted) starts on another worker: its run never goes back to
// requested or queued, keeps its creation time, and the attempt counts
// both deliveries.
func TestRequeuedTaskNeverMovesItsRunBackward(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindDeveloper)
	e.start()
	ctx := context.Background()
	key := e.keys.Run("requeued")
	e.rc.HSet(ctx, key, protocol.RunFieldStatus, "running", protocol.RunFieldCreatedAt, "2026-01-01T00:00:00Z",
		protocol.RunFieldWorkerID, "dead-worker", protocol.RunFieldAttempts, 1)
	var mu sync.Mutex
	seen := map[string]bool{}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			default:
			}
			st, _ := e.rc.HGet(ctx, key, protocol.RunFieldStatus).Result()
			mu.Lock()
			seen[st] = true
			mu.Unlock()
		}
	}()
	e.send(e.keys.DeveloperInput(), protocol.Task{RequestID: "requeued", Prompt: "fake:sleep-300"})
	outs := e.waitOutputs(e.keys.DeveloperOutput(), 1, 10*time.Second)
	close(stopWatch)
	<-watched
	if o := outs[0]; o.Status != protocol.StatusComplete || o.Attempt != 2 {
		t.Fatalf("output %+v: want complete, attempt 2", o)
	}
	if seen["requested"] || seen["queued"] {
		t.Errorf("the run went backward: statuses seen %v", seen)
	}
	h, _ := e.rc.HGetAll(ctx, key).Result()
	if h[protocol.RunFieldStatus] != "completed" || h[protocol.RunFieldCreatedAt] != "2026-01-01T00:00:00Z" ||
		h[protocol.RunFieldWorkerID] != e.cfg.WorkerID || h[protocol.RunFieldAttempt] != "2" {
		t.Errorf("run hash %v", h)
	}
	for _, l := range e.lifecycleEvents() {
		if l.Event == protocol.EventTaskStarted && l.Detail["attempt"] != float64(2) {
			t.Errorf("task_started attempt %v, want 2", l.Detail["attempt"])
		}
	}
}

// A task that timed out used the API calls it made: its output reports
// them, and the usage counters count the task once, with that usage, even
// when the task is delivered again.
func TestTimedOutTaskUsageCountedOnce(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	ctx := context.Background()
	id := e.cfg.WorkerID
	task := protocol.Task{RequestID: "slow", ProjectID: "p-timeout", Prompt: "fake:hang-after-turn", TimeoutSeconds: 1}
	e.send(e.keys.Input(id), task)
	o := e.waitOutputs(e.keys.Output(id), 1, 15*time.Second)[0]
	if o.Error == nil || o.Error.Code != protocol.CodeAgentTimeout || o.Usage.Input != 2001 || o.Usage.Output != 80 {
		t.Fatalf("output %+v (error %+v): want AGENT_TIMEOUT with the usage of its one API call", o, o.Error)
	}
	e.send(e.keys.Input(id), task) // the same request again: answered already
	testkit.Eventually(t, "the duplicate acknowledged", 5*time.Second, func() bool {
		n, _ := e.rc.XPending(ctx, e.keys.Input(id), protocol.WorkerGroup).Result()
		l, _ := e.rc.XLen(ctx, e.keys.Input(id)).Result()
		return n.Count == 0 && l == 2
	})
	time.Sleep(200 * time.Millisecond)
	for _, key := range []string{e.keys.UsageProject("p-timeout"), e.keys.UsageWorker(id), e.keys.UsageSession(o.SessionID)} {
		u, _ := e.rc.HGetAll(ctx, key).Result()
		if u["tasks"] != "1" || u["input"] != "2001" || u["output"] != "80" {
			t.Errorf("%s = %v, want one task with the output's usage", key, u)
		}
	}
}

// A task whose request was answered before wakes a paused worker like any
// other: the worker asks to be paused again.
func TestDuplicateTaskAsksForPauseAgain(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	ctx := context.Background()
	id := e.cfg.WorkerID
	controls := func() []protocol.Control {
		msgs, _ := e.rc.XRange(ctx, e.keys.Control(), "-", "+").Result()
		var cs []protocol.Control
		for _, m := range msgs {
			data, _ := protocol.EntryData(m.Values)
			c, err := protocol.DecodeControl(data)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		return cs
	}
	task := protocol.Task{RequestID: "once", Prompt: "fake:complete"}
	e.send(e.keys.Input(id), task)
	e.waitOutputs(e.keys.Output(id), 1, 10*time.Second)
	testkit.Eventually(t, "the first pause request", 5*time.Second, func() bool { return len(controls()) == 1 })
	e.send(e.keys.Input(id), task)
	testkit.Eventually(t, "a pause request after the duplicate", 5*time.Second, func() bool { return len(controls()) == 2 })
	if c := controls()[1]; c.Action != protocol.ControlPause || c.RequestID != "once" || !strings.HasPrefix(c.Reason, "duplicate_task") {
		t.Fatalf("second control %+v", c)
	}
	if outs, _ := e.docs(e.keys.Output(id)); len(outs) != 1 {
		t.Fatalf("%d outputs: the duplicate published one", len(outs))
	}
}

// Every stream the wrapper appends to is trimmed (approximate MAXLEN), and
// a run hash expires a retention after its terminal state.
func TestStreamsAreTrimmedAndRunsExpire(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	// Approximate trimming drops whole nodes: small nodes make it show.
	if _, err := e.redis.Do("CONFIG", "SET", "stream-node-max-entries", "2"); err != nil {
		t.Fatal(err)
	}
	e.cfg.StreamMaxLen, e.cfg.RunRetention = 4, time.Minute
	e.start()
	ctx := context.Background()
	id := e.cfg.WorkerID
	const tasks = 12
	for i := range tasks {
		e.send(e.keys.Input(id), protocol.Task{RequestID: fmt.Sprintf("t%d", i), Prompt: "fake:progress"})
	}
	testkit.Eventually(t, "every task done", 30*time.Second, func() bool {
		n, _ := e.rc.HGet(ctx, e.keys.Status(id), protocol.StatusFieldTasksDone).Int()
		return n == tasks
	})
	e.pubFlushed()
	for _, stream := range []string{e.keys.Output(id), e.keys.Lifecycle(), e.keys.Control()} {
		if n, _ := e.rc.XLen(ctx, stream).Result(); n > 8 {
			t.Errorf("%s holds %d entries, want about 4", stream, n)
		}
	}
	for i := range tasks {
		if ttl, _ := e.rc.PTTL(ctx, e.keys.Run(fmt.Sprintf("t%d", i))).Result(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("run t%d expires in %v, want within the retention", i, ttl)
		}
	}
}

// pubFlushed waits until the worker's last events (after its last output)
// are in Redis.
func (e *env) pubFlushed() {
	e.t.Helper()
	testkit.Eventually(e.t, "the last pause request", 5*time.Second, func() bool {
		evs := e.lifecycle()
		return len(evs) > 0 && evs[len(evs)-1] == string(protocol.EventPauseRequested)
	})
}
