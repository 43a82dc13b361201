package examples

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// build compiles a program of this repository into a temporary directory.
func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// TestQuickstartAndConsumers runs the quickstart against a runtime with
// the Go consumer following the streams, then the Node consumer over what
// they hold: every entry must pass the JSON Schemas.
func TestQuickstartAndConsumers(t *testing.T) {
	rt := spawnertest.Start(t, nil)
	quickstart := build(t, ".", "./quickstart")
	consumer := build(t, ".", "./consumer")
	env := append(os.Environ(), rt.Env...)

	var consumed bytes.Buffer
	// Its idle time counts from its first entry; the context bounds a
	// consumer that never gets one.
	tctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tailer := exec.CommandContext(tctx, consumer, "-idle-exit", "6s")
	tailer.Env, tailer.Stdout, tailer.Stderr = env, &consumed, &consumed
	if err := tailer.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // following before the worker exists

	rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": `worker-wrapper progress --step "Greeting" --pct 100`, "description": "progress"}}},
		{Text: "Hello!\n{\"status\": \"complete\", \"result\": {\"greeting\": \"hello\"}}"},
	}})
	cmd := exec.Command(quickstart)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `output: complete, result {"greeting":"hello"}`) {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}

	if err := tailer.Wait(); err != nil {
		t.Fatalf("consumer: %v\n%s", err, consumed.String())
	}
	got := consumed.String()
	for _, want := range []string{" created (spawner)", " started (wrapper)", `progress`, `"Greeting" 100%`, ` complete {"greeting":"hello"}`, " removed (spawner)"} {
		if !strings.Contains(got, want) {
			t.Errorf("the consumer did not print %q:\n%s", want, got)
		}
	}

	// The Node consumer: its npm packages, then every entry validated.
	nodeDir := "node-consumer"
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "ajv")); err != nil {
		npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		npm.Dir = nodeDir
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("npm ci (run make setup for node and npm): %v\n%s", err, out)
		}
	}
	node := exec.Command("node", "consume.js", "--quiet")
	node.Dir, node.Env = nodeDir, env
	nout, err := node.CombinedOutput()
	if err != nil || !strings.Contains(string(nout), "invalid 0") || strings.Contains(string(nout), "progress 0,") || strings.Contains(string(nout), "output 0;") {
		t.Fatalf("node consumer: %v\n%s", err, nout)
	}
	t.Logf("node consumer: %s", strings.TrimSpace(string(nout)))

	// A broken entry makes it fail, naming the entry.
	if err := rt.RC.XAdd(context.Background(), &redis.XAddArgs{Stream: rt.Keys.Lifecycle(),
		Values: map[string]any{"data": `{"v":1,"type":"lifecycle","worker_id":"w1","event":"exploded"}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	node = exec.Command("node", "consume.js", "--quiet")
	node.Dir, node.Env = nodeDir, env
	nout, err = node.CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(nout), "INVALID") || !strings.Contains(string(nout), "invalid 1") {
		t.Fatalf("node consumer over a broken entry: exit %d\n%s", code, nout)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestDemo runs `make demo`'s program (with the real worker-manager
// binary) against a Redis of its own and checks its timeline.
func TestDemo(t *testing.T) {
	testkit.WorkerImages(t)
	r := testkit.StartRedis(t)
	manager := build(t, "../spawner", "./cmd/worker-manager")
	gw := build(t, "../gateway", "./cmd/worker-gateway")
	demo := build(t, ".", "./demo")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logs := t.TempDir()
	cmd := exec.CommandContext(ctx, demo, "-manager", manager, "-gateway", gw, "-redis", r.URL(), "-logs", logs)
	// The workers' disks under a directory of the test's own.
	cmd.Env = append(os.Environ(), "WORKER_KEY_PREFIX=demotest", "ANTHROPIC_API_KEY=", "WORKER_DISK_DIR="+testkit.TempDiskDir(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		mlog, _ := os.ReadFile(filepath.Join(logs, "worker-manager.log"))
		t.Fatalf("demo: %v\n%s\nthe manager's log:\n%s", err, out, mlog)
	}
	got := string(out)
	for _, want := range []string{
		"stub model server", "worker-gateway started", "the workers are sealed, no network of their own", "worker-manager started",
		`refused: network example.com:443`, "is not on claude-1's egress allowlist", "warm pool claude-shop: a worker of this spec was made ahead",
		"from the warm pool",
		"private git host https://127.0.0.2:", "trusts its CA (GATEWAY_UPSTREAM_CA)",
		"cloned https://127.0.0.2/shop.git through the gateway with the credential it added: git -C shop log --oneline shows ",
		" Add the shop's catalogue\"", "requests with the credential, 0 without",
		"the token is in none of claude-1's environment, processes, files or git config",
		"claude-1 progress  \"Committed hello.txt\" 100%", "claude-1 lifecycle paused", "claude-1 lifecycle unpaused",
		"resume session", "droid-1  progress  \"Counted files\" 100%", "droid-1  output    docs-1",
		"the agent's push to release: refused by the gateway, a warning of the task: push to refs/heads/release: not the task's branch refs/heads/agentvisor/catalogue-notes",
		"output git: branch agentvisor/catalogue-notes of https://127.0.0.2/shop.git from main", "merges cleanly: true",
		"claude-1 permission_request perm-", "permission_reply → ", "claude-1 output    shop-3", "the allowed touch ran",
		"droid-1  output    docs-2", " cancelled CANCELLED (cancelled while running", "droid-1  lifecycle task_cancelled",
		"command hibernate: claude-1 is hibernated (0 containers", "task shop-4 woke claude-1 (incarnation 2,",
		"the session outlived the container",
		"codex-1  progress  \"Created status.txt\" 100%", "codex-1  output    codex-2", "resume session (continued)",
		"one codex app-server process served both", "codex-1  output    codex-3", "codex-1  lifecycle task_cancelled",
		"demo-shop      6", "demo-docs      2", "demo-codex     3", "0 worker containers left", "demo complete",
		"dashboard: http://127.0.0.1:", `agentvisor_tasks_total{agent="claude",code="",status="complete"} 7`,
		`agentvisor_tasks_total{agent="droid",code="CANCELLED",status="cancelled"} 1`,
		`agentvisor_tasks_total{agent="codex",code="CANCELLED",status="cancelled"} 1`,
		`agentvisor_cost_usd_total{project="demo-shop"}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the demo's timeline lacks %q:\n%s", want, got)
		}
	}
	// Droid reports no cost: the demo's Droid project has the wrapper's
	// estimate (MODEL_PRICES prices the stub's model).
	if m := regexp.MustCompile(`(?m)^  demo-docs .* (\d+\.\d{4})$`).FindStringSubmatch(got); m == nil || m[1] == "0.0000" {
		t.Errorf("the Droid project's cost in the usage table: %v", m)
	}
}
