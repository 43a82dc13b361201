package spawner

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/testkit"
)

func TestOpsConfigFromEnv(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("fedcba9876543210fedc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want OpsConfig
		err  string
	}{
		{name: "defaults", want: OpsConfig{MetricsAddr: "127.0.0.1:9464", MetricsMaxProjects: 50, GCRetention: 7 * 24 * time.Hour, GCInterval: 24 * time.Hour}},
		{name: "set", env: map[string]string{"METRICS_ADDR": "0.0.0.0:9000", "METRICS_MAX_PROJECTS": "3", "GC_RETENTION": "48h", "GC_INTERVAL": "1h", "GC_DRY_RUN": "true"},
			want: OpsConfig{MetricsAddr: "0.0.0.0:9000", MetricsMaxProjects: 3, GCRetention: 48 * time.Hour, GCInterval: time.Hour, GCDryRun: true}},
		{name: "off", env: map[string]string{"METRICS_ADDR": "off"}, want: OpsConfig{MetricsMaxProjects: 50, GCRetention: 7 * 24 * time.Hour, GCInterval: 24 * time.Hour}},
		{name: "bad addr", env: map[string]string{"METRICS_ADDR": "9464"}, err: "METRICS_ADDR"},
		{name: "bad retention", env: map[string]string{"GC_RETENTION": "soon"}, err: "GC_RETENTION"},
		{name: "bad dry run", env: map[string]string{"GC_DRY_RUN": "maybe"}, err: "GC_DRY_RUN"},
		{name: "token", env: map[string]string{"OPS_TOKEN": "0123456789abcdef0123"},
			want: OpsConfig{MetricsAddr: "127.0.0.1:9464", MetricsMaxProjects: 50, GCRetention: 7 * 24 * time.Hour, GCInterval: 24 * time.Hour, OpsToken: "0123456789abcdef0123"}},
		{name: "token file", env: map[string]string{"OPS_TOKEN_FILE": tokenFile},
			want: OpsConfig{MetricsAddr: "127.0.0.1:9464", MetricsMaxProjects: 50, GCRetention: 7 * 24 * time.Hour, GCInterval: 24 * time.Hour, OpsToken: "fedcba9876543210fedc"}},
		{name: "token before its file", env: map[string]string{"OPS_TOKEN": "0123456789abcdef0123", "OPS_TOKEN_FILE": tokenFile},
			want: OpsConfig{MetricsAddr: "127.0.0.1:9464", MetricsMaxProjects: 50, GCRetention: 7 * 24 * time.Hour, GCInterval: 24 * time.Hour, OpsToken: "0123456789abcdef0123"}},
		{name: "short token", env: map[string]string{"OPS_TOKEN": "secret"}, err: "OPS_TOKEN"},
		{name: "missing token file", env: map[string]string{"OPS_TOKEN_FILE": tokenFile + ".gone"}, err: "OPS_TOKEN_FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OpsConfigFromEnv(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

// The manager state on a real Redis: listed with its host, pid, version,
// start, last reconciliation and leases while it runs; gone at once when
// it stops cleanly.
func TestPresence(t *testing.T) {
	rc := testkit.NewRedisClient(t)
	keys := protocol.Keys{Prefix: "presencetest"}
	ctx := context.Background()
	s := New(Config{Keys: keys, ManagerID: "m1"}, nil, rc, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.obs.addr = "127.0.0.1:9999"
	if ok, err := s.rdb.TakeLease(ctx, ctlplane.LeaderLease, s.instance, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	s.obs.reconciled(time.Now(), ReconcileReport{})
	p := parts{s}.presence()
	p.Start(ctx)
	var ms []ManagerState
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		if ms, err = ListManagers(ctx, rc, keys); err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	host, _ := os.Hostname()
	if len(ms) != 1 {
		t.Fatalf("managers: %+v", ms)
	}
	m := ms[0]
	if m.ID != "m1" || m.Host != host || m.PID != os.Getpid() || m.Version == "" || m.StartedAt.IsZero() || m.LastReconcileAt.IsZero() ||
		len(m.Leases) != 1 || m.Leases[0] != ctlplane.LeaderLease || m.MetricsAddr != "127.0.0.1:9999" {
		t.Fatalf("manager state %+v", m)
	}
	if ttl := rc.TTL(ctx, ctlplane.ManagerStateKey(keys, "m1")).Val(); ttl <= 0 || ttl > ctlplane.ManagerStateTTLSeconds*time.Second {
		t.Fatalf("state TTL %v", ttl)
	}
	p.Stop()
	if ms, _ := ListManagers(ctx, rc, keys); len(ms) != 0 {
		t.Fatalf("after stop: %+v", ms)
	}
	// A member whose hash expired (its manager died) is dropped.
	rc.SAdd(ctx, ctlplane.ManagersKey(keys), "dead")
	if ms, _ := ListManagers(ctx, rc, keys); len(ms) != 0 || rc.SIsMember(ctx, ctlplane.ManagersKey(keys), "dead").Val() {
		t.Fatalf("a dead manager is listed: %+v", ms)
	}
}

// Worker-side metrics come from the streams: tasks by status and code,
// tokens and cost per project (bounded), crash-to-output, heartbeats
// missed; the workers and the queue are read at the scrape; /metrics
// serves them.
func TestMetricsFromStreams(t *testing.T) {
	rc := testkit.NewRedisClient(t)
	keys := protocol.Keys{Prefix: "metricstest"}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(Config{Keys: keys, ManagerID: "m1"}, nil, rc, nil, log)
	m := NewMetrics(rc, keys, 1)
	s.UseMetrics(m, "")
	rc.SAdd(ctx, keys.Workers(), "w1", "w2")
	rc.HSet(ctx, keys.Status("w1"), protocol.StatusFieldState, string(protocol.WorkerIdle), protocol.StatusFieldHealth, string(protocol.HealthHealthy),
		protocol.StatusFieldAgentType, "claude", protocol.StatusFieldHost, "m1", protocol.StatusFieldKind, "long_lived")
	rc.HSet(ctx, keys.Status("w2"), protocol.StatusFieldState, string(protocol.WorkerIdle), protocol.StatusFieldHealth, string(protocol.HealthHealthy),
		protocol.StatusFieldAgentType, "claude", protocol.StatusFieldHost, "m1", protocol.StatusFieldContainer, string(protocol.ContainerPaused))
	rc.RPush(ctx, ctlplane.CreationQueueKey(keys), "c1", "c2")

	jobs := s.obs.leaderJobs(s.env)
	for _, j := range jobs {
		j.Start(ctx)
	}
	defer func() {
		for _, j := range jobs {
			j.Stop()
		}
	}()
	time.Sleep(300 * time.Millisecond) // the reader starts after what the streams hold

	now := time.Now()
	testkit.XAdd(t, rc, keys.Lifecycle(), testkit.Doc(protocol.Lifecycle{WorkerID: "w1", Event: protocol.EventDegraded, Source: "spawner", Timestamp: now}))
	testkit.XAdd(t, rc, keys.Lifecycle(), testkit.Doc(protocol.Lifecycle{WorkerID: "w1", Event: protocol.EventDied, Source: "spawner", Timestamp: now}))
	for _, tr := range []protocol.WorkerTransition{
		{From: protocol.WorkerIdle, To: protocol.WorkerBusy, FromHealth: protocol.HealthHealthy, ToHealth: protocol.HealthHealthy, InPrevious: 2 * time.Second},
		{From: protocol.WorkerBusy, To: protocol.WorkerIdle, FromHealth: protocol.HealthHealthy, ToHealth: protocol.HealthHealthy, InPrevious: 30 * time.Second},
		{From: protocol.WorkerIdle, To: protocol.WorkerIdle, FromHealth: protocol.HealthHealthy, ToHealth: protocol.HealthDegraded, InPrevious: time.Second},
	} {
		testkit.XAdd(t, rc, keys.Lifecycle(), testkit.Doc(protocol.Lifecycle{WorkerID: "w2", Event: protocol.EventStateChanged, Source: "wrapper",
			Timestamp: now, Detail: tr.Record().Detail()}))
	}
	time.Sleep(20 * time.Millisecond)
	testkit.XAdd(t, rc, keys.Output("w1"), testkit.Doc(protocol.Output{Timestamp: now, RequestID: "r1", WorkerID: "w1", AgentType: "claude", ProjectID: "shop",
		Status: protocol.StatusFailed, Error: &protocol.Error{Code: protocol.CodeKilled, Message: "killed"}, DurationMS: 1500}))
	testkit.XAdd(t, rc, keys.Output("w2"), testkit.Doc(protocol.Output{Timestamp: now, RequestID: "r2", WorkerID: "w2", AgentType: "claude", ProjectID: "shop",
		Status: protocol.StatusComplete, Usage: protocol.Usage{Input: 100, Output: 20}, CostUSD: 0.5, DurationMS: 800,
		Session: &protocol.SessionDecision{Action: protocol.SessionNew, Reason: protocol.SessionReasonHeld}}))
	// A retiring session's summary turn: no output, counted all the same.
	testkit.XAdd(t, rc, keys.Lifecycle(), testkit.Doc(protocol.Lifecycle{WorkerID: "w2", Event: protocol.EventUsage, Source: "wrapper", Timestamp: now,
		Detail: map[string]any{"project_id": "shop", "input": 40, "output": 5, "cache_read": 0, "cache_creation": 0, "cost_usd": 0.125}}))
	testkit.XAdd(t, rc, keys.Output("w2"), testkit.Doc(protocol.Output{Timestamp: now, RequestID: "r3", WorkerID: "w2", AgentType: "claude", ProjectID: "docs",
		Status: protocol.StatusFailed, Error: &protocol.Error{Code: protocol.CodeResumeFailed, Message: "x"}, Usage: protocol.Usage{Input: 7}, CostUSD: 0.25}))

	testkit.XAdd(t, rc, keys.Output("w2"), testkit.Doc(protocol.Progress{Timestamp: now, RequestID: "r2", WorkerID: "w2",
		Level: protocol.LevelWarning, Step: "refused: network example.com:443", Refused: &protocol.Refusal{Tool: "network", Host: "example.com", Port: 443}}))
	// What the gateway refused, on model.sock and over the connection budget.
	testkit.XAdd(t, rc, keys.Output("w2"), testkit.Doc(protocol.Progress{Timestamp: now, RequestID: "r2", WorkerID: "w2",
		Level: protocol.LevelWarning, Step: "refused: model POST /v1/messages", Refused: &protocol.Refusal{Tool: protocol.RefusedToolModel, Code: protocol.RefusedModelToken}}))
	testkit.XAdd(t, rc, keys.Output("w2"), testkit.Doc(protocol.Progress{Timestamp: now, RequestID: "r2", WorkerID: "w2",
		Level: protocol.LevelWarning, Step: "refused: connections", Refused: &protocol.Refusal{Tool: protocol.RefusedToolConnections, Code: protocol.RefusedConnectionCap}}))
	testkit.XAdd(t, rc, keys.Output("w2"), testkit.Doc(protocol.Progress{Timestamp: now, RequestID: "r2", WorkerID: "w2",
		Level: protocol.LevelWarning, Step: "refused: Bash", Refused: &protocol.Refusal{Tool: "Bash", Command: "rm -rf /"}}))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (testutil.ToFloat64(m.tasks.WithLabelValues("claude", "failed", "RESUME_FAILED")) < 1 ||
		testutil.ToFloat64(m.refusals.WithLabelValues("command")) < 1) { // the last entries written
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"tasks complete", testutil.ToFloat64(m.tasks.WithLabelValues("claude", "complete", "")), 1},
		{"tasks killed", testutil.ToFloat64(m.tasks.WithLabelValues("claude", "failed", "KILLED")), 1},
		{"resume failures", testutil.ToFloat64(m.resumeFailures), 1},
		{"an affinity miss (the session held by another worker)", testutil.ToFloat64(m.sessions.WithLabelValues(protocol.SessionReasonHeld)), 1},
		{"shop input tokens, the summary turn's among them", testutil.ToFloat64(m.tokens.WithLabelValues("shop", "input")), 140},
		{"shop output tokens", testutil.ToFloat64(m.tokens.WithLabelValues("shop", "output")), 25},
		{"shop cost, the summary turn's among it", testutil.ToFloat64(m.cost.WithLabelValues("shop")), 0.625},
		{"second project is _other", testutil.ToFloat64(m.cost.WithLabelValues("_other")), 0.25},
		{"degraded", testutil.ToFloat64(m.heartbeatsMiss.WithLabelValues("degraded")), 1},
		{"crash to output observed", float64(testutil.CollectAndCount(m.crashToOutput)), 1},
		{"idle>busy", testutil.ToFloat64(m.transitions.WithLabelValues("idle", "busy")), 1},
		{"healthy>degraded", testutil.ToFloat64(m.transitions.WithLabelValues("healthy", "degraded")), 1},
		{"egress refused", testutil.ToFloat64(m.refusals.WithLabelValues("network")), 1},
		{"command refused", testutil.ToFloat64(m.refusals.WithLabelValues("command")), 1},
		{"model refused", testutil.ToFloat64(m.refusals.WithLabelValues("model")), 1},
		{"connections refused", testutil.ToFloat64(m.refusals.WithLabelValues("connections")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	token := ops.NewToken()
	srv, addr, err := ops.Serve("127.0.0.1:0", m.Registry, nil, token, log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`agentvisor_workers{agent="claude",health="healthy",host="m1",state="idle"} 1`,
		`agentvisor_workers{agent="claude",health="healthy",host="m1",state="paused"} 1`,
		`agentvisor_creation_queue_depth 2`,
		`agentvisor_tasks_total{agent="claude",code="KILLED",status="failed"} 1`,
		`agentvisor_cost_usd_total{project="shop"} 0.625`,
		`agentvisor_crash_to_output_seconds_count 1`,
		`agentvisor_task_duration_seconds_count{agent="claude",status="failed"} 2`,
		`agentvisor_worker_state_duration_seconds_sum{health="healthy",state="busy"} 30`,
		`agentvisor_worker_state_duration_seconds_count{health="healthy",state="idle"} 2`,
		`process_resident_memory_bytes`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
