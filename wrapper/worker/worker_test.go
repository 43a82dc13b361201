package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/wrapper/internal/testbin"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

var bins struct{ fake, fakeACP, wrapper string }

func TestMain(m *testing.M) {
	var dir string
	testbin.Main(func() int {
		bins.fake, bins.wrapper = filepath.Join(dir, "fakeagent"), filepath.Join(dir, "worker-wrapper")
		bins.fakeACP = filepath.Join(dir, "fakeacp")
		return m.Run()
	}, map[string]string{"fakeagent": testbin.FakeAgent, "worker-wrapper": testbin.Wrapper, "fakeacp": testbin.FakeACP}, &dir)
}

// env is one test's Redis, client and worker configuration.
type env struct {
	t     *testing.T
	redis *testkit.Redis
	rc    *redis.Client
	keys  protocol.Keys
	cfg   Config
}

func newEnv(t *testing.T, agentType protocol.AgentType, kind protocol.Kind) *env {
	t.Helper()
	r, rc := testkit.StartRedisClient(t)
	vars := map[string]string{
		"WORKER_ID": "w-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), "REDIS_URL": r.URL(),
		"AGENT_TYPE": string(agentType), "WORKER_KIND": string(kind), "AGENT_BIN": bins.fake,
		"WORKSPACE": t.TempDir(), "ALLOWED_COMMANDS": "worker.progress", "HEARTBEAT_INTERVAL": "200ms",
		"RESULT_GRACE": "300ms", "KILL_GRACE": "300ms",
	}
	if agentType == protocol.AgentACP { // the fake ACP agent (internal/fakeacp)
		vars["AGENT_COMMAND"] = bins.fakeACP
	}
	cfg, err := FromEnv(mapEnv(vars))
	if err != nil {
		t.Fatal(err)
	}
	cfg.SelfPath = bins.wrapper
	return &env{t: t, redis: r, rc: rc, keys: cfg.Keys, cfg: cfg}
}

func mapEnv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// start runs a Worker until the test ends (or stop is called).
func (e *env) start(environ ...string) (stop func(), w *Worker) {
	return e.startWith(nil, environ...)
}

// startWith is start with an injected clock.
func (e *env) startWith(now func() time.Time, environ ...string) (stop func(), w *Worker) {
	e.t.Helper()
	var logOut io.Writer = io.Discard
	if os.Getenv("WORKER_TEST_LOG") != "" {
		logOut = os.Stderr
	}
	w, err := New(e.cfg, Options{Logger: slog.New(slog.NewJSONHandler(logOut, nil)), Environ: append(os.Environ(), environ...), Now: now})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx); w.Close() }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(func() { w.Terminate(); stop() })
	return stop, w
}

func (e *env) send(stream string, task protocol.Task) {
	e.t.Helper()
	doc, err := task.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.rc.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// docs returns the documents of a stream, decoded by type.
func (e *env) docs(stream string) (outputs []protocol.Output, progress []protocol.Progress) {
	msgs, _ := e.rc.XRange(context.Background(), stream, "-", "+").Result()
	for _, m := range msgs {
		data, err := protocol.EntryData(m.Values)
		if err != nil {
			e.t.Fatalf("entry %s: %v", m.ID, err)
		}
		_, typ, _ := protocol.PeekType(data)
		switch typ {
		case protocol.TypeOutput:
			o, err := protocol.DecodeOutput(data)
			if err != nil {
				e.t.Fatalf("output entry does not decode: %v\n%s", err, data)
			}
			outputs = append(outputs, o)
		case protocol.TypePermissionRequest:
			if _, err := protocol.DecodePermissionRequest(data); err != nil {
				e.t.Fatalf("permission request entry does not decode: %v", err)
			}
		case protocol.TypeProgress:
			p, err := protocol.DecodeProgress(data)
			if err != nil {
				e.t.Fatalf("progress entry does not decode: %v", err)
			}
			progress = append(progress, p)
		default:
			e.t.Fatalf("unexpected entry type %q on %s", typ, stream)
		}
	}
	return outputs, progress
}

// waitOutputs waits until the stream holds n outputs.
func (e *env) waitOutputs(stream string, n int, timeout time.Duration) []protocol.Output {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		outs, _ := e.docs(stream)
		if len(outs) >= n {
			return outs
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d outputs on %s after %v, want %d", len(outs), stream, timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lifecycleEvents decodes the whole lifecycle stream.
func (e *env) lifecycleEvents() []protocol.Lifecycle {
	msgs, _ := e.rc.XRange(context.Background(), e.keys.Lifecycle(), "-", "+").Result()
	var evs []protocol.Lifecycle
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		l, err := protocol.DecodeLifecycle(data)
		if err != nil {
			e.t.Fatalf("lifecycle entry: %v", err)
		}
		evs = append(evs, l)
	}
	return evs
}

// lifecycle returns the names of the lifecycle events, in order, but the
// state_changed ones (transitions_test.go follows those).
func (e *env) lifecycle() []string {
	var names []string
	for _, l := range e.lifecycleEvents() {
		if l.Event != protocol.EventStateChanged {
			names = append(names, string(l.Event))
		}
	}
	return names
}

// fakeAgentTypes are the agent types whose CLIs the fake agent plays
// (internal/fakeagent); Codex runs for real only (realagent_test.go).
var fakeAgentTypes = []protocol.AgentType{protocol.AgentClaude, protocol.AgentDroid}

func TestTaskCompletesWithProgressStatusAndPauseRequest(t *testing.T) {
	for _, agentType := range fakeAgentTypes {
		t.Run(string(agentType), func(t *testing.T) {
			e := newEnv(t, agentType, protocol.KindLongLived)
			e.start()
			id := e.cfg.WorkerID
			task := protocol.Task{RequestID: "r1", TaskID: "t1", ProjectID: "p1", Prompt: "fake:progress do it",
				Metadata: map[string]any{"chat": "42"}}
			e.send(e.keys.Input(id), task)
			outs := e.waitOutputs(e.keys.Output(id), 1, 15*time.Second)
			o := outs[0]
			if o.Status != protocol.StatusComplete || o.RequestID != "r1" || o.TaskID != "t1" || o.ProjectID != "p1" ||
				string(o.Result) != `{"ok":true}` || o.Metadata["chat"] != "42" || o.AgentType != agentType {
				t.Fatalf("output %+v", o)
			}
			if o.Usage.Input != 4000 || o.SessionID == "" || o.Session == nil || o.Session.Action != protocol.SessionNew {
				t.Errorf("usage/session %+v %v %+v", o.Usage, o.SessionID, o.Session)
			}
			// Claude reports each call's usage: the context is the last
			// call's (2001+9000+100), not the summed 22200.
			if agentType == protocol.AgentClaude && o.ContextTokens != 11101 {
				t.Errorf("context tokens %d, want 11101", o.ContextTokens)
			}
			_, prog := e.docs(e.keys.Output(id))
			if len(prog) != 1 || prog[0].Step != "Running tests" || *prog[0].ProgressPct != 50 || prog[0].StepsCompleted != 1 {
				t.Fatalf("progress %+v", prog)
			}
			run, _ := e.rc.HGetAll(context.Background(), e.keys.Run("r1")).Result()
			if run["status"] != "completed" || run["steps_completed"] != "1" || run["current_step"] != "Running tests" {
				t.Errorf("run hash %v", run)
			}
			testkit.Eventually(e.t, "pause request and idle status", 5*time.Second, func() bool {
				st, _ := e.rc.HGetAll(context.Background(), e.keys.Status(id)).Result()
				n, _ := e.rc.XLen(context.Background(), e.keys.Control()).Result()
				return st["status"] == "idle" && st["request_id"] == "" && st["task_started_at"] == "" && st["attempt"] == "" &&
					st["tasks_completed"] == "1" && n == 1
			})
			ctl, _ := e.rc.XRange(context.Background(), e.keys.Control(), "-", "+").Result()
			data, _ := protocol.EntryData(ctl[0].Values)
			c, err := protocol.DecodeControl(data)
			if err != nil || c.WorkerID != id || c.RequestID != "r1" {
				t.Fatalf("control %+v %v", c, err)
			}
			// The events go through the publisher's queue: the last may
			// come a moment after the control request.
			want, evs := "started,task_started,task_completed,pause_requested", ""
			testkit.Eventually(e.t, "the lifecycle events", 3*time.Second, func() bool {
				evs = strings.Join(e.lifecycle(), ",")
				return evs == want || len(evs) > len(want)
			})
			if evs != want {
				t.Errorf("lifecycle %s", evs)
			}
			testkit.Eventually(e.t, "a heartbeat that counts the task", 3*time.Second, func() bool {
				hb, err := e.rc.Get(context.Background(), e.keys.Heartbeat(id)).Bytes()
				if err != nil {
					return false
				}
				h, err := protocol.DecodeHeartbeat(hb)
				if err != nil {
					t.Fatalf("heartbeat does not decode: %v", err)
				}
				return h.TasksCompleted == 1 && h.RSSBytes > 0 && h.Status == protocol.HeartbeatIdle
			})
			if ttl, _ := e.rc.PTTL(context.Background(), e.keys.Heartbeat(id)).Result(); ttl <= 0 || ttl > 600*time.Millisecond {
				t.Errorf("heartbeat TTL %v, want <= 3 intervals", ttl)
			}
			if n, _ := e.rc.XPending(context.Background(), e.keys.Input(id), protocol.WorkerGroup).Result(); n.Count != 0 {
				t.Errorf("%d entries left unacknowledged", n.Count)
			}
		})
	}
}

func TestFailuresCarryCodes(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start("ANTHROPIC_API_KEY=sk-test-very-secret-123")
	in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
	tests := []struct {
		prompt string
		code   protocol.Code
		status protocol.OutputStatus
	}{
		{"fake:crash-after-init", protocol.CodeAgentCrashed, protocol.StatusFailed},
		{"fake:is-error", protocol.CodeAgentError, protocol.StatusFailed},
		{"fake:no-stop", protocol.CodeNoStopOutput, protocol.StatusFailed},
		{"fake:blocked", "", protocol.StatusBlocked},
		{"fake:leak-secret", protocol.CodeAgentCrashed, protocol.StatusFailed},
		{"fake:ignore-sigterm", protocol.CodeAgentTimeout, protocol.StatusFailed},
	}
	for i, tt := range tests {
		task := protocol.Task{RequestID: fmt.Sprintf("r%d", i), Prompt: tt.prompt}
		if tt.code == protocol.CodeAgentTimeout {
			task.TimeoutSeconds = 1
		}
		e.send(in, task)
	}
	outs := e.waitOutputs(out, len(tests), 30*time.Second)
	for i, tt := range tests {
		o := outs[i]
		if o.RequestID != fmt.Sprintf("r%d", i) || o.Status != tt.status || (tt.code != "" && (o.Error == nil || o.Error.Code != tt.code)) {
			t.Errorf("%s: output %+v error %+v", tt.prompt, o, o.Error)
		}
		b, _ := json.Marshal(o)
		if strings.Contains(string(b), "very-secret") {
			t.Errorf("%s: the API key leaked into the output: %s", tt.prompt, b)
		}
		if tt.prompt == "fake:leak-secret" && !strings.Contains(o.Error.Message, "[REDACTED]") {
			t.Errorf("stderr tail not in the error: %q", o.Error.Message)
		}
	}
	run, _ := e.rc.HGetAll(context.Background(), e.keys.Run("r0")).Result()
	if run["status"] != "failed" || !strings.HasPrefix(run["error"], "AGENT_CRASHED: ") {
		t.Errorf("run hash %v", run)
	}
}

func TestInvalidTaskIsAnsweredAndAcknowledged(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
	ctx := context.Background()
	e.rc.XAdd(ctx, &redis.XAddArgs{Stream: in, Values: map[string]any{"data": `{"v":1,"type":"task","request_id":"bad-1","prompt":""}`}})
	e.rc.XAdd(ctx, &redis.XAddArgs{Stream: in, Values: map[string]any{"data": `not json at all`}})
	e.rc.XAdd(ctx, &redis.XAddArgs{Stream: in, Values: map[string]any{"payload": `x`}})
	e.send(in, protocol.Task{RequestID: "good", Prompt: "fake:complete"})
	outs := e.waitOutputs(out, 4, 10*time.Second)
	if !strings.HasPrefix(outs[0].RequestID, "invalid-") || outs[0].Error.Code != protocol.CodeInvalidTask ||
		!strings.Contains(outs[0].Error.Message, "field prompt") || !strings.Contains(outs[0].Error.Message, "request_id was bad-1") {
		t.Errorf("first %+v %+v", outs[0], outs[0].Error)
	}
	for _, o := range outs[1:3] {
		if !strings.HasPrefix(o.RequestID, "invalid-") || o.Error.Code != protocol.CodeInvalidTask {
			t.Errorf("garbage answered with %+v", o)
		}
	}
	if outs[3].RequestID != "good" || outs[3].Status != protocol.StatusComplete {
		t.Errorf("the loop did not go on: %+v", outs[3])
	}
	// Each answer, the rejections too, is followed by a pause request.
	testkit.Eventually(t, "four pause requests", 5*time.Second, func() bool {
		n, _ := e.rc.XLen(ctx, e.keys.Control()).Result()
		return n == 4
	})
	if n, _ := e.rc.XPending(ctx, in, protocol.WorkerGroup).Result(); n.Count != 0 {
		t.Errorf("%d entries left unacknowledged", n.Count)
	}
}

func TestPendingEntriesFirstAndRedeliveryPublishesNothing(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	ctx := context.Background()
	id := e.cfg.WorkerID
	in, out := e.keys.Input(id), e.keys.Output(id)
	// A previous incarnation read two entries and died: one of them it had
	// already answered (its run is terminal), the other not.
	e.rc.XGroupCreateMkStream(ctx, in, protocol.WorkerGroup, "0")
	e.send(in, protocol.Task{RequestID: "done-before", Prompt: "fake:complete"})
	e.send(in, protocol.Task{RequestID: "never-answered", Prompt: "fake:complete"})
	e.rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: protocol.WorkerGroup, Consumer: id, Streams: []string{in, ">"}, Count: 2})
	e.rc.HSet(ctx, e.keys.Run("done-before"), "status", "completed")
	e.send(in, protocol.Task{RequestID: "new", Prompt: "fake:complete"})
	e.start()
	outs := e.waitOutputs(out, 2, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	outs, _ = e.docs(out)
	// The redelivered entry is its second delivery.
	if len(outs) != 2 || outs[0].RequestID != "never-answered" || outs[0].Attempt != 2 || outs[1].RequestID != "new" || outs[1].Attempt != 1 {
		var ids []string
		for _, o := range outs {
			ids = append(ids, fmt.Sprintf("%s (attempt %d)", o.RequestID, o.Attempt))
		}
		t.Fatalf("outputs %v, want never-answered (attempt 2) then new (attempt 1)", ids)
	}
	if n, _ := e.rc.XPending(ctx, in, protocol.WorkerGroup).Result(); n.Count != 0 {
		t.Errorf("%d entries left unacknowledged", n.Count)
	}
}

func TestProgressEndpointRefusesWhatItMust(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.cfg.AllowedCommands, _ = protocol.ParseAllowedCommands([]string{"project.get"})
	_, denied := e.start()
	e2 := *e
	e2.cfg.WorkerID += "-allowed"
	e2.cfg.AllowedCommands, _ = protocol.ParseAllowedCommands([]string{"worker.*"})
	_, w := e2.start()
	var url string
	post := func(token, body string) int {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set(ProgressTokenHeader, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testkit.Eventually(e.t, "progress endpoints", 5*time.Second, func() bool { return denied.ProgressURL() != "" && w.ProgressURL() != "" })
	// Progress is the runtime's own channel: a worker whose ALLOWED_COMMANDS
	// lacks worker.progress takes progress calls too (this one belongs to
	// no run).
	url = denied.ProgressURL()
	if c := post("x", `{"step":"s"}`); c != http.StatusConflict {
		t.Errorf("without worker.progress in ALLOWED_COMMANDS: %d, want 409 (no run)", c)
	}
	url = w.ProgressURL()
	if c := post("x", `{"step":"s"}`); c != http.StatusConflict {
		t.Errorf("no run: %d", c)
	}
	if c := post("x", `{"step":"s","progress_pct":400}`); c != http.StatusBadRequest {
		t.Errorf("bad report: %d", c)
	}
	if c := post("x", `garbage`); c != http.StatusBadRequest {
		t.Errorf("garbage: %d", c)
	}
	var out, errb strings.Builder
	if code := ProgressCommand([]string{"--step", "x", "--pct", "abc"}, mapEnv(nil), &out, &errb); code != 2 {
		t.Errorf("bad --pct exit %d", code)
	}
	if code := ProgressCommand([]string{"--step", "x"}, mapEnv(map[string]string{"WORKER_PROGRESS_URL": url, "WORKER_PROGRESS_TOKEN": "nope"}), &out, &errb); code != 1 {
		t.Errorf("refused call exit %d", code)
	}
}

func TestDeveloperWorkersShareTheQueue(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindDeveloper)
	e.start()
	e2 := *e
	e2.cfg.WorkerID = e.cfg.WorkerID + "-b"
	e2.start()
	for i := 0; i < 6; i++ {
		e.send(e.keys.DeveloperInput(), protocol.Task{RequestID: fmt.Sprintf("d%d", i), Prompt: "fake:sleep-100"})
	}
	outs := e.waitOutputs(e.keys.DeveloperOutput(), 6, 20*time.Second)
	seen, workers := map[string]int{}, map[string]int{}
	for _, o := range outs {
		seen[o.RequestID]++
		workers[o.WorkerID]++
		if o.Attempt != 1 {
			t.Errorf("attempt %d", o.Attempt)
		}
	}
	if len(seen) != 6 || len(workers) != 2 {
		t.Fatalf("requests %v, workers %v: want 6 answered once, by both workers", seen, workers)
	}
}

// Shutdown publishes stopping at once, lets the task in flight finish
// within the grace, and keeps what the task leaves: its output, usage and
// session record.
func TestShutdownLetsTheTaskFinishWithinGrace(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	stop, _ := e.start()
	ctx := context.Background()
	id := e.cfg.WorkerID
	e.send(e.keys.Input(id), protocol.Task{RequestID: "slow", ProjectID: "grace", Prompt: "fake:sleep-2000"})
	testkit.Eventually(e.t, "task start", 5*time.Second, func() bool {
		return strings.Contains(strings.Join(e.lifecycle(), ","), "task_started")
	})
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }() // grace is not cut: the task finishes
	testkit.Eventually(e.t, "stopping published while the task runs", time.Second, func() bool {
		st, _ := e.rc.HGet(ctx, e.keys.Status(id), "status").Result()
		return strings.Contains(strings.Join(e.lifecycle(), ","), "stopping") && st == "stopping"
	})
	if outs, _ := e.docs(e.keys.Output(id)); len(outs) != 0 {
		t.Fatalf("the task ended before stopping was seen: %+v", outs)
	}
	<-stopped
	outs, _ := e.docs(e.keys.Output(id))
	if len(outs) != 1 || outs[0].Status != protocol.StatusComplete {
		t.Fatalf("outputs %+v", outs)
	}
	if evs := strings.Join(e.lifecycle(), ","); evs != "started,task_started,stopping,task_completed,stopped" {
		t.Fatalf("lifecycle %v", evs)
	}
	if st, _ := e.rc.HGet(ctx, e.keys.Status(id), "status").Result(); st != "stopped" {
		t.Errorf("status %q", st)
	}
	if n, _ := e.rc.Exists(ctx, e.keys.Heartbeat(id)).Result(); n != 0 {
		t.Error("heartbeat key left after a clean stop")
	}
	if u, _ := e.rc.HGetAll(ctx, e.keys.UsageProject("grace")).Result(); u["tasks"] != "1" || u["input"] != "4000" {
		t.Errorf("usage of the task that ended in the grace: %v", u)
	}
	if s, _ := e.rc.HGetAll(ctx, e.keys.Session(protocol.AgentClaude, "grace")).Result(); s[protocol.SessionFieldSessionID] != outs[0].SessionID {
		t.Errorf("session record of the task that ended in the grace: %v", s)
	}
}

func TestTerminateStopsTheTaskWithTerminated(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	stop, w := e.start()
	e.send(e.keys.Input(e.cfg.WorkerID), protocol.Task{RequestID: "long", Prompt: "fake:ignore-sigterm"})
	testkit.Eventually(e.t, "task start", 5*time.Second, func() bool {
		return strings.Contains(strings.Join(e.lifecycle(), ","), "task_started")
	})
	w.Terminate()
	stop()
	outs, _ := e.docs(e.keys.Output(e.cfg.WorkerID))
	if len(outs) != 1 || outs[0].Error == nil || outs[0].Error.Code != protocol.CodeTerminated {
		t.Fatalf("outputs %+v", outs)
	}
}

func TestRedisRestartMidTaskGivesExactlyOneOutput(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	id := e.cfg.WorkerID
	e.send(e.keys.Input(id), protocol.Task{RequestID: "through-outage", Prompt: "fake:progress fake:sleep-1500"})
	testkit.Eventually(e.t, "task start", 5*time.Second, func() bool {
		return strings.Contains(strings.Join(e.lifecycle(), ","), "task_started")
	})
	// The data directory survives the restart only through a dump: save
	// the streams first, like a Redis with persistence would.
	if _, err := e.redis.Do("SAVE"); err != nil {
		t.Fatal(err)
	}
	if err := e.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the agent finishes while Redis is down
	if err := e.redis.Start(); err != nil {
		t.Fatal(err)
	}
	outs := e.waitOutputs(e.keys.Output(id), 1, 30*time.Second)
	time.Sleep(time.Second)
	outs, _ = e.docs(e.keys.Output(id))
	if len(outs) != 1 || outs[0].RequestID != "through-outage" || outs[0].Status != protocol.StatusComplete {
		t.Fatalf("outputs %+v, want exactly one", outs)
	}
	testkit.Eventually(e.t, "heartbeats resume", 5*time.Second, func() bool {
		n, _ := e.rc.Exists(context.Background(), e.keys.Heartbeat(id)).Result()
		return n == 1
	})
}

// A malformed entry that claims the request id of a run another worker is
// doing is answered under invalid-<entry id>: it neither publishes for that
// run nor keeps the real worker's output from being published.
func TestInvalidTaskCannotSpeakForAnotherRun(t *testing.T) {
	a := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	a.start()
	b := *a
	b.cfg.WorkerID += "-b"
	b.start()
	ctx := context.Background()
	inA, outA := a.keys.Input(a.cfg.WorkerID), a.keys.Output(a.cfg.WorkerID)
	inB, outB := b.keys.Input(b.cfg.WorkerID), b.keys.Output(b.cfg.WorkerID)
	a.send(inA, protocol.Task{RequestID: "shared-r", Prompt: "fake:sleep-1500 fake:complete"})
	testkit.Eventually(t, "A running shared-r", 10*time.Second, func() bool {
		s, _ := a.rc.HGet(ctx, a.keys.Run("shared-r"), protocol.RunFieldStatus).Result()
		return s == string(protocol.RunRunning)
	})
	id, err := a.rc.XAdd(ctx, &redis.XAddArgs{Stream: inB, Values: map[string]any{"data": `{"v":1,"type":"task","request_id":"shared-r","prompt":""}`}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	bOut := b.waitOutputs(outB, 1, 10*time.Second)[0]
	if bOut.RequestID != "invalid-"+id || bOut.Error == nil || bOut.Error.Code != protocol.CodeInvalidTask ||
		!strings.Contains(bOut.Error.Message, "shared-r") {
		t.Fatalf("B answered %+v (error %+v), want invalid-%s echoing shared-r in the message", bOut, bOut.Error, id)
	}
	aOut := a.waitOutputs(outA, 1, 20*time.Second)[0]
	if aOut.RequestID != "shared-r" || aOut.Status != protocol.StatusComplete {
		t.Fatalf("A's output %+v (error %+v)", aOut, aOut.Error)
	}
	run, _ := a.rc.HGetAll(ctx, a.keys.Run("shared-r")).Result()
	if run[protocol.RunFieldStatus] != string(protocol.RunCompleted) || run[protocol.RunFieldWorkerID] != a.cfg.WorkerID {
		t.Errorf("run hash of shared-r: %v", run)
	}
}
