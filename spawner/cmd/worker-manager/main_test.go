package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// A real Prometheus server (Debian's prometheus) scrapes a live
// worker-manager, found through the manager state it writes in Redis,
// after a worker ran a task; it sees the manager's metrics and loads the
// project's alert rules.
func TestPrometheusScrapesManager(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not installed (make setup installs Debian's): ", err)
	}
	testkit.WorkerImages(t)
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	stub, err := stubmodel.Start(stubmodel.Script{})
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()
	t.Setenv("ANTHROPIC_BASE_URL", stub.URL)
	t.Setenv("ANTHROPIC_API_KEY", "sk-stub-0123456789")
	keys := protocol.Keys{Prefix: fmt.Sprintf("prom%d", time.Now().UnixNano())}
	testkit.CleanupLabelled(t, testkit.KeyPrefixLabel(keys.Prefix)) // its worker's project volume too
	env := map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": keys.Prefix, "MANAGER_ID": "prom-test", "HOST_ID": "prom-host",
		"METRICS_ADDR": "127.0.0.1:0", "WORKER_STOP_TIMEOUT": "12s", "HEARTBEAT_INTERVAL": "2s", "WORKER_DISK_DIR": testkit.TempDiskDir(t)}
	// The operator token in a file, as Prometheus reads it too.
	tokenFile := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(tokenFile, []byte(ops.NewToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env["OPS_TOKEN_FILE"] = tokenFile
	// Its workers are sealed (the default): this host's gateway first.
	env["GATEWAY_DIR"] = startGateway(t, r.Addr, stub.URL)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("worker-manager exited %d", code)
		}
	}()

	// The manager says where its metrics are.
	var addr string
	for deadline := time.Now().Add(15 * time.Second); addr == ""; {
		ms, err := spawner.ListManagers(ctx, rc, keys)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 {
			addr = ms[0].MetricsAddr
		}
		if time.Now().After(deadline) {
			t.Fatalf("no manager state with a metrics address: %+v", ms)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Nothing of it without the token.
	for _, path := range []string{"/metrics", "/", "/state", "/events"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the operator token: %d, want 401", path, resp.StatusCode)
		}
	}

	// A worker that completes a task.
	cli := &client.Commands{Redis: rc, Keys: keys, Timeout: 3 * time.Minute}
	reply, err := cli.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "shop"}})
	if err != nil {
		t.Fatal(err)
	}
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: `{"status": "complete", "result": {"ok": true}}`}}})
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer tcancel()
	o, err := (&client.Tasks{Redis: rc, Keys: keys}).Run(tctx, reply.Worker.WorkerID, protocol.Task{ProjectID: "shop", Prompt: "Do it."}, nil)
	if err != nil || o.Status != protocol.StatusComplete {
		t.Fatalf("task: %+v %v", o, err)
	}

	// Prometheus, scraping every 250 ms, with the alert rules.
	_, file, _, _ := runtime.Caller(0)
	rules := filepath.Join(filepath.Dir(file), "..", "..", "..", "ops", "prometheus", "alerts.yml")
	dir := t.TempDir()
	cfg := fmt.Sprintf("global: {scrape_interval: 250ms, evaluation_interval: 1s}\nrule_files: [%q]\n"+
		"scrape_configs:\n  - job_name: agentvisor\n    authorization: {type: Bearer, credentials_file: %q}\n    static_configs: [{targets: [%q]}]\n",
		rules, tokenFile, addr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	web := freeAddr(t)
	prom := exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web)
	var promLog strings.Builder
	prom.Stdout, prom.Stderr = &promLog, &promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = prom.Process.Kill()
		_ = prom.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", promLog.String())
		}
	}()

	query := func(q string) []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	} {
		resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return body.Data.Result
	}
	for _, q := range []string{
		`up{job="agentvisor"} == 1`,
		`sum(agentvisor_workers{agent="claude",host="prom-host"}) == 1`,
		`agentvisor_tasks_total{agent="claude",status="complete"} == 1`,
		`agentvisor_creates_total{outcome="ok"} == 1`,
		`agentvisor_create_duration_seconds_count{outcome="ok"} == 1`,
		`agentvisor_tokens_total{project="shop",type="input"} > 0`,
		`agentvisor_leases_held{lease="leader"} == 1`,
		`agentvisor_creation_queue_depth == 0`,
	} {
		deadline := time.Now().Add(30 * time.Second)
		for len(query(q)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("Prometheus never saw %s", q)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The alert rules are loaded and evaluated (none fires here).
	resp, err := http.Get("http://" + web + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rulesBody struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name   string `json:"name"`
					State  string `json:"state"`
					Health string `json:"health"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rulesBody); err != nil || len(rulesBody.Data.Groups) != 1 || len(rulesBody.Data.Groups[0].Rules) < 9 {
		t.Fatalf("rules: %+v %v", rulesBody, err)
	}
	for _, rule := range rulesBody.Data.Groups[0].Rules {
		if rule.Health == "err" || rule.State == "firing" {
			t.Errorf("rule %s: health %s, state %s", rule.Name, rule.Health, rule.State)
		}
	}
}

// A METRICS_ADDR in use (a second manager on the host with the default)
// costs the metrics, not the manager: it runs, says so in its state (no
// metrics address), and exits cleanly.
func TestMetricsAddrInUse(t *testing.T) {
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	keys := protocol.Keys{Prefix: fmt.Sprintf("busy%d", time.Now().UnixNano())}
	env := map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": keys.Prefix, "MANAGER_ID": "second", "METRICS_ADDR": busy.Addr().String()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	var ms []spawner.ManagerState
	for deadline := time.Now().Add(15 * time.Second); len(ms) == 0; time.Sleep(50 * time.Millisecond) {
		if ms, err = spawner.ListManagers(ctx, rc, keys); err != nil || time.Now().After(deadline) {
			t.Fatalf("no manager state: %v", err)
		}
	}
	if ms[0].ID != "second" || ms[0].MetricsAddr != "" {
		t.Errorf("manager state %+v", ms[0])
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// Workers are sealed by default; a manager started where no gateway
// answers says so at once, naming the directory it looked in, and runs
// (creates are refused until the gateway comes); one that finds its
// gateway says nothing of the kind; one told to give workers the host's
// network warns that they are not sealed.
func TestManagerSaysWhenItsGatewayIsMissing(t *testing.T) {
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	for _, tc := range []struct {
		name    string
		gateway bool
		mode    string // WORKER_NETWORK_MODE; empty: the default
	}{{"no gateway", false, ""}, {"a gateway", true, ""}, {"host network", false, "host"}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.gateway {
				dir = startGateway(t, r.Addr, "http://127.0.0.1:1")
			}
			keys := protocol.Keys{Prefix: fmt.Sprintf("gw%d", time.Now().UnixNano())}
			env := map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": keys.Prefix, "MANAGER_ID": "gw", "GATEWAY_DIR": dir, "WORKER_NETWORK_MODE": tc.mode}
			var logBuf testkit.SyncBuffer
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, func(k string) string { return env[k] }, slog.New(slog.NewJSONHandler(&logBuf, nil)))
			}()
			// The check comes before the manager reads commands; its state
			// in Redis says it got past it.
			testkit.Eventually(t, "a manager state", 15*time.Second, func() bool {
				ms, _ := spawner.ListManagers(ctx, rc, keys)
				return len(ms) > 0
			})
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit %d", code)
			}
			said := strings.Contains(logBuf.String(), "gateway does not answer") && strings.Contains(logBuf.String(), dir)
			if want := !tc.gateway && tc.mode == ""; said != want {
				t.Fatalf("logged the missing gateway: %v, want %v; log:\n%s", said, want, logBuf.String())
			}
			unsealed := strings.Contains(logBuf.String(), "workers are not sealed")
			if unsealed != (tc.mode == "host") {
				t.Fatalf("logged less isolation: %v, want %v; log:\n%s", unsealed, tc.mode == "host", logBuf.String())
			}
		})
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startGateway starts a gateway in the test's process, relayed to Redis
// at redisAddr and the model API at modelURL; it returns its directory.
func startGateway(t *testing.T, redisAddr, modelURL string) string {
	t.Helper()
	dir := gatewaytest.Dir(t)
	gatewaytest.Start(t, gateway.Config{Dir: dir, Redis: redisAddr, Model: modelURL}) // the URL: plain HTTP to the stub
	return dir
}

// A manager that cannot make a worker's disk (here: a disk directory it
// cannot create) stops at start, exit 2, naming WORKER_DISK_LIMIT and the
// way to run without; with WORKER_DISK_LIMIT=0 the same manager starts.
func TestManagerStopsWhenItCannotMakeDisks(t *testing.T) {
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	keys := protocol.Keys{Prefix: fmt.Sprintf("nodisk%d", time.Now().UnixNano())}
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"REDIS_URL": r.URL(), "WORKER_KEY_PREFIX": keys.Prefix, "MANAGER_ID": "nodisk", "WORKER_DISK_DIR": filepath.Join(notADir, "disks")}
	var logBuf bytes.Buffer
	if code := run(context.Background(), func(k string) string { return env[k] }, slog.New(slog.NewJSONHandler(&logBuf, nil))); code != 2 ||
		!strings.Contains(logBuf.String(), "WORKER_DISK_LIMIT") || !strings.Contains(logBuf.String(), "WORKER_DISK_LIMIT=0 runs workers without a disk limit") {
		t.Fatalf("exit %d, log:\n%s\nwant exit 2 naming WORKER_DISK_LIMIT", code, logBuf.String())
	}
	env["WORKER_DISK_LIMIT"] = "0"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	testkit.Eventually(t, "the manager without a disk limit started", 15*time.Second, func() bool {
		ms, err := spawner.ListManagers(ctx, rc, keys)
		return err == nil && len(ms) == 1
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
}
