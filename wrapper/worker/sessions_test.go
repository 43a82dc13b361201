package worker

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// clock is an injected clock that tests move forward.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

const finalText = "Done.\n{\"status\": \"complete\", \"result\": {}}"

// runTask sends a task and returns its output.
func (e *env) runTask(task protocol.Task) protocol.Output {
	e.t.Helper()
	out := e.keys.Output(e.cfg.WorkerID)
	before, _ := e.docs(out)
	e.send(e.keys.Input(e.cfg.WorkerID), task)
	outs := e.waitOutputs(out, len(before)+1, 90*time.Second)
	o := outs[len(outs)-1]
	if o.RequestID != task.RequestID {
		e.t.Fatalf("output for %s, want %s", o.RequestID, task.RequestID)
	}
	return o
}

func decision(o protocol.Output) string {
	if o.Session == nil {
		return "none"
	}
	return string(o.Session.Action) + "/" + o.Session.Reason
}

func TestClaudeProjectSessions(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	// The stub's usage puts 11 100 tokens in the context per call: with a
	// threshold of 20 000 (of a 200 000 window), the context of a session
	// overflows after two calls.
	e.cfg.Sessions.ContextThreshold = 20_000
	var clk clock
	e.startWith(clk.now, environ...)
	stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})

	o1 := e.runTask(protocol.Task{RequestID: "s1", ProjectID: "alpha", Prompt: "FIRST-TASK-MARKER: set up the project"})
	if o1.Status != protocol.StatusComplete || decision(o1) != "new/no_session" || o1.SessionID == "" {
		t.Fatalf("task 1: %s %+v", decision(o1), o1)
	}
	o2 := e.runTask(protocol.Task{RequestID: "s2", ProjectID: "alpha", Prompt: "second task"})
	if decision(o2) != "resume/continued" || o2.SessionID != o1.SessionID {
		t.Fatalf("task 2: %s, session %s (task 1: %s)", decision(o2), o2.SessionID, o1.SessionID)
	}
	reqs := stub.Requests()
	if last := reqs[len(reqs)-1]; !strings.Contains(last.Text(), "FIRST-TASK-MARKER") {
		t.Fatalf("the resumed session did not carry task 1's turns to the model: %q", last.Text())
	}

	// Another project, and force_new_session, start fresh.
	if o := e.runTask(protocol.Task{RequestID: "s3", ProjectID: "beta", Prompt: "other project"}); decision(o) != "new/no_session" || o.SessionID == o1.SessionID {
		t.Fatalf("other project: %s", decision(o))
	}
	if o := e.runTask(protocol.Task{RequestID: "s4", ProjectID: "beta", Prompt: "again", ForceNewSession: true}); decision(o) != "new/force_new_session" {
		t.Fatalf("force_new_session: %s", decision(o))
	}

	// alpha's context is now 2 x 11 100 (two calls' worth): the next task
	// retires the session, asking it for a summary first. The summaries'
	// usage is their own, to be found in the counters.
	summaryUsage := stubmodel.Usage{InputTokens: 7, OutputTokens: 3, CacheReadInputTokens: 5, CacheCreationInputTokens: 1}
	stub.SetScript(stubmodel.Script{
		Steps:    []stubmodel.Step{{Text: "## Architecture\nSUMMARY-MARKER: a Go service.\n{\"status\": \"complete\"}", Usage: &summaryUsage}},
		Fallback: &stubmodel.Step{Text: finalText},
	})
	stub.Reset()
	rc := e.rc
	rc.HSet(context.Background(), e.keys.Session(protocol.AgentClaude, "alpha"), protocol.SessionFieldContextTokens, 22_200)
	o5 := e.runTask(protocol.Task{RequestID: "s5", ProjectID: "alpha", Prompt: "third task"})
	if decision(o5) != "new/context_overflow" || o5.SessionID == o1.SessionID || o5.Status != protocol.StatusComplete {
		t.Fatalf("overflow: %s %+v", decision(o5), o5)
	}
	reqs = stub.Requests()
	if len(reqs) < 2 || !strings.Contains(reqs[0].Text(), "about to be retired") {
		t.Fatalf("no summary turn in the old session (%d requests)", len(reqs))
	}
	if !strings.Contains(reqs[len(reqs)-1].System, "SUMMARY-MARKER") {
		t.Fatalf("the new session's system prompt lacks the stored summary")
	}
	if ctxText, _ := rc.Get(context.Background(), e.keys.ProjectContext("alpha")).Result(); !strings.Contains(ctxText, "SUMMARY-MARKER") || strings.Contains(ctxText, `"status"`) {
		t.Fatalf("stored project context %q", ctxText)
	}

	// The summary turn counts in the retired session's counters.
	if got, _ := rc.HGetAll(context.Background(), e.keys.UsageSession(o1.SessionID)).Result(); got["input"] != strconv.FormatInt(o1.Usage.Input+o2.Usage.Input+7, 10) || got["tasks"] != "2" {
		t.Fatalf("retired session's usage %v: want its 2 tasks' and the summary's 7 input tokens", got)
	}

	// A day later the session is stale: it too is summarised.
	stub.SetScript(stubmodel.Script{
		Steps:    []stubmodel.Step{{Text: "SUMMARY-MARKER again.", Usage: &summaryUsage}},
		Fallback: &stubmodel.Step{Text: finalText},
	})
	clk.advance(25 * time.Hour)
	if o := e.runTask(protocol.Task{RequestID: "s6", ProjectID: "alpha", Prompt: "after a day"}); decision(o) != "new/stale" {
		t.Fatalf("stale: %s", decision(o))
	}

	// A session that no longer exists (the container was replaced): the
	// resume fails, and the same task runs at once in a new session.
	rc.HSet(context.Background(), e.keys.Session(protocol.AgentClaude, "alpha"), protocol.SessionFieldSessionID, "00000000-0000-4000-8000-000000000000")
	o7 := e.runTask(protocol.Task{RequestID: "s7", ProjectID: "alpha", Prompt: "resume a lost session"})
	if decision(o7) != "new/resume_failed" || o7.Status != protocol.StatusComplete || o7.Session.ResumeError == nil ||
		o7.Session.ResumeError.Code != protocol.CodeResumeFailed || !strings.Contains(o7.Session.ResumeError.Message, "No conversation found") {
		t.Fatalf("lost session: %s %+v %+v", decision(o7), o7, o7.Session)
	}

	// Usage per project is the sum over its tasks and the two summary
	// turns (the wrapper's, not tasks: no output reports them); the
	// worker's, over every task and those turns.
	summaries := protocol.Usage{Input: 2 * 7, Output: 2 * 3, CacheRead: 2 * 5, CacheCreation: 2 * 1}
	var want, all protocol.Usage
	var cost, allCost float64
	outs, _ := e.docs(e.keys.Output(e.cfg.WorkerID))
	for _, o := range outs {
		all, allCost = all.Add(o.Usage), allCost+o.CostUSD
		if o.ProjectID == "alpha" {
			want = want.Add(o.Usage)
			cost += o.CostUSD
		}
	}
	for _, c := range []struct {
		key   string
		usage protocol.Usage
		cost  float64
		tasks string
		whose string
	}{
		{e.keys.UsageProject("alpha"), want.Add(summaries), cost, "5", "project"},
		{e.keys.UsageWorker(e.cfg.WorkerID), all.Add(summaries), allCost, "7", "worker"},
	} {
		got, _ := rc.HGetAll(context.Background(), c.key).Result()
		if got["input"] != strconv.FormatInt(c.usage.Input, 10) || got["output"] != strconv.FormatInt(c.usage.Output, 10) ||
			got["cache_read"] != strconv.FormatInt(c.usage.CacheRead, 10) || got["cache_creation"] != strconv.FormatInt(c.usage.CacheCreation, 10) ||
			got["tasks"] != c.tasks {
			t.Fatalf("%s usage %v, want the sum %+v over %s tasks and 2 summaries", c.whose, got, c.usage, c.tasks)
		}
		// The summaries cost something too (Claude prices the stub's
		// model as its default).
		if v, _ := strconv.ParseFloat(got["cost_usd"], 64); v <= c.cost*1.0001 {
			t.Fatalf("%s cost %v: want the tasks' %v and the summaries'", c.whose, got["cost_usd"], c.cost)
		}
	}
	// Each summary turn is on the lifecycle stream too (usage), with its
	// project and tokens: what the manager's metrics count beside the
	// outputs, so that they agree with these counters.
	var told protocol.Usage
	for _, l := range e.lifecycleEvents() {
		if l.Event != protocol.EventUsage {
			continue
		}
		n := func(k string) int64 { v, _ := l.Detail[k].(float64); return int64(v) }
		if l.Detail["project_id"] != "alpha" || l.Detail["reason"] != "own_turn" {
			t.Fatalf("usage event %+v: want project alpha, reason own_turn", l.Detail)
		}
		told = told.Add(protocol.Usage{Input: n("input"), Output: n("output"), CacheRead: n("cache_read"), CacheCreation: n("cache_creation")})
	}
	if told != summaries {
		t.Fatalf("usage events sum to %+v, want the 2 summaries' %+v", told, summaries)
	}
	sess, _ := rc.HGetAll(context.Background(), e.keys.Session(protocol.AgentClaude, "alpha")).Result()
	if sess["worker_id"] != e.cfg.WorkerID || sess["session_id"] != o7.SessionID || sess["tasks"] != "1" {
		t.Fatalf("session record %v", sess)
	}
}

func TestDroidResumeWithoutCloudFallsBack(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentDroid)
	e.start(environ...)
	stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
	o1 := e.runTask(protocol.Task{RequestID: "d1", ProjectID: "gamma", Prompt: "first"})
	if o1.Status != protocol.StatusComplete || decision(o1) != "new/no_session" {
		t.Fatalf("task 1: %s %+v", decision(o1), o1)
	}
	// Droid fetches sessions from its vendor's cloud, which is out of
	// reach here: the resume fails and the task runs in a new session.
	o2 := e.runTask(protocol.Task{RequestID: "d2", ProjectID: "gamma", Prompt: "second"})
	if o2.Status != protocol.StatusComplete || decision(o2) != "new/resume_failed" || o2.Session.ResumeError == nil {
		t.Fatalf("task 2: %s %+v", decision(o2), o2)
	}
}

func TestResumeFailedRule(t *testing.T) {
	captured := func(name string) agent.Outcome {
		b, err := os.ReadFile("../agent/testdata/captured/" + name + ".stream.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		var o agent.Outcome
		for _, line := range strings.Split(string(b), "\n") {
			for _, ev := range (agent.ClaudeParser{}).ParseLine([]byte(line)) {
				switch {
				case ev.Init != nil:
					o.Init = ev.Init
				case ev.Result != nil:
					o.Result = ev.Result
				}
			}
		}
		stderr, _ := os.ReadFile("../agent/testdata/captured/" + name + ".stderr")
		o.Stderr, o.Exit = string(stderr), agent.ExitStatus{Code: 1}
		return o
	}
	resuming := SessionPlan{ResumeID: "00000000-0000-4000-8000-000000000000"}
	tests := []struct {
		name string
		plan SessionPlan
		o    agent.Outcome
		want bool
	}{
		{"claude stream-json, unknown session", resuming, captured("claude-2.1.197-resume-missing"), true},
		{"droid without its cloud: exit 1, no output", resuming, agent.Outcome{Exit: agent.ExitStatus{Code: 1}}, true},
		{"not a resume", SessionPlan{}, agent.Outcome{Exit: agent.ExitStatus{Code: 1}}, false},
		{"a resumed run that crashed after init", resuming, agent.Outcome{Init: &agent.Init{SessionID: "s"}, Exit: agent.ExitStatus{Code: 1}}, false},
		{"a resumed run with a result", resuming, agent.Outcome{Result: &agent.Result{Text: "ok"}}, false},
		{"a resumed run that timed out", resuming, agent.Outcome{TimedOut: true, Exit: agent.ExitStatus{Code: 137}}, false},
		{"exit 0 with nothing", resuming, agent.Outcome{}, false},
		{"a persistent process: an error of no turns, still running", resuming, agent.Outcome{Result: &agent.Result{IsError: true, Subtype: "error_during_execution"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, msg := resumeFailed(tt.plan, tt.o); got != tt.want {
				t.Fatalf("resumeFailed = %v (%q), want %v", got, msg, tt.want)
			}
		})
	}
}

func TestThresholdScalesWithTheWindow(t *testing.T) {
	p := &ProjectSessions{cfg: SessionConfig{ContextThreshold: 150_000}.withDefaults()}
	for window, want := range map[int64]int64{0: 150_000, 200_000: 150_000, 1_000_000: 750_000} {
		if got := p.threshold(window); got != want {
			t.Errorf("threshold(%d) = %d, want %d", window, got, want)
		}
	}
}

// The project policy works from its narrow dependencies alone: the Redis
// store, a runner for its own turns and a clock. An overflowing session is
// retired through the runner (one summary turn resuming it), the summary
// becomes the project's context (with its secrets redacted), and the task
// starts a new session.
func TestProjectSessionsFromTheirDependencies(t *testing.T) {
	r := testkit.StartRedis(t)
	keys := protocol.Keys{}
	store, err := rdb.Open(r.URL(), "", keys)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()
	var clk clock
	var turns []Invocation
	run := func(_ context.Context, task protocol.Task, inv Invocation, timeout time.Duration) agent.Outcome {
		turns = append(turns, inv)
		return agent.Outcome{Result: &agent.Result{Text: "## Architecture\nSUMMARY key=sk-planted-77\n{\"status\": \"complete\"}"}}
	}
	p := NewProjectSessions(SessionDeps{Store: store, Run: run, Now: clk.now, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		AgentType: protocol.AgentClaude, WorkerID: "w1", Redact: NewRedactor([]string{"X_API_KEY=sk-planted-77"}, "").Redact},
		SessionConfig{ContextThreshold: 1000, Summarize: true})
	ctx := context.Background()
	rc.HSet(ctx, keys.Session(protocol.AgentClaude, "proj"), protocol.SessionFieldSessionID, "old-session",
		protocol.SessionFieldContextTokens, 5000, protocol.SessionFieldLastActivity, protocol.FormatTime(clk.now()))
	plan := p.Decide(ctx, protocol.Task{RequestID: "r1", ProjectID: "proj", Prompt: "go on"})
	if plan.Decision.Action != protocol.SessionNew || plan.Decision.Reason != protocol.SessionReasonOverflow || plan.ResumeID != "" {
		t.Fatalf("plan %+v", plan)
	}
	if len(turns) != 1 || turns[0].ResumeID != "old-session" || turns[0].Prompt != SummaryPrompt {
		t.Fatalf("summary turns %+v", turns)
	}
	if plan.Context != "## Architecture\nSUMMARY key=[REDACTED]" { // stored redacted
		t.Fatalf("the new session's context %q", plan.Context)
	}
}

// A retiring session's summary turn runs in the persistent agent, in the
// session it resumes: a persistent Droid loads it from its files, where a
// `droid exec` would ask its vendor's cloud and fail. Its usage goes to the
// project's counters beside the tasks', in no task's output.
func TestPersistentSummaryTurn(t *testing.T) {
	for _, agentType := range []protocol.AgentType{protocol.AgentClaude, protocol.AgentDroid} {
		t.Run(string(agentType), func(t *testing.T) {
			e, stub, environ := realAgentEnv(t, agentType)
			e.cfg.Persistent = true
			e.start(environ...)
			stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: finalText}})
			o1 := e.runTask(protocol.Task{RequestID: "p1", ProjectID: "zeta", Prompt: "FIRST-TASK-MARKER: set up"})
			if o1.Status != protocol.StatusComplete || o1.SessionID == "" {
				t.Fatalf("task 1: %+v (error %+v)", o1, o1.Error)
			}
			// The session's context is past the threshold: the next task
			// retires it, with a summary first.
			e.rc.HSet(context.Background(), e.keys.Session(agentType, "zeta"), protocol.SessionFieldContextTokens, 1_000_000)
			summaryUsage := stubmodel.Usage{InputTokens: 7, OutputTokens: 3, CacheReadInputTokens: 5, CacheCreationInputTokens: 1}
			stub.SetScript(stubmodel.Script{
				Steps:    []stubmodel.Step{{Text: "SUMMARY-MARKER: a Go service.", Usage: &summaryUsage}},
				Fallback: &stubmodel.Step{Text: finalText},
			})
			stub.Reset()
			o2 := e.runTask(protocol.Task{RequestID: "p2", ProjectID: "zeta", Prompt: "second"})
			if decision(o2) != "new/context_overflow" || o2.Status != protocol.StatusComplete || o2.SessionID == o1.SessionID {
				t.Fatalf("task 2: %s %+v (error %+v)", decision(o2), o2, o2.Error)
			}
			reqs := stub.Requests()
			if len(reqs) < 2 || !strings.Contains(reqs[0].Text(), "about to be retired") || !strings.Contains(reqs[0].Text(), "FIRST-TASK-MARKER") {
				t.Fatalf("no summary turn in the old session (%d requests)", len(reqs))
			}
			if text, _ := e.rc.Get(context.Background(), e.keys.ProjectContext("zeta")).Result(); !strings.Contains(text, "SUMMARY-MARKER") {
				t.Fatalf("stored project context %q", text)
			}
			got, _ := e.rc.HGetAll(context.Background(), e.keys.UsageProject("zeta")).Result()
			want := o1.Usage.Add(o2.Usage).Add(protocol.Usage{Input: 7, Output: 3, CacheRead: 5, CacheCreation: 1})
			if got["input"] != strconv.FormatInt(want.Input, 10) || got["output"] != strconv.FormatInt(want.Output, 10) ||
				got["cache_read"] != strconv.FormatInt(want.CacheRead, 10) || got["tasks"] != "2" {
				t.Fatalf("project usage %v, want the 2 tasks' and the summary's %+v", got, want)
			}
		})
	}
}
