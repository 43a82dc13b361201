package examples

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// stubControl serves the stub model's script to a program in another
// language: POST /script replaces it (stubmodel.LoadScript's JSON), GET
// /requests returns the text of every request the model got. It returns
// the server's URL, on loopback.
func stubControl(t *testing.T, stub *stubmodel.Server) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /script", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s, err := stubmodel.LoadScript(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		stub.SetScript(s)
		_, _ = w.Write([]byte("{}"))
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, r *http.Request) {
		texts := []string{}
		for _, req := range stub.Requests() {
			texts = append(texts, req.Text())
		}
		_ = json.NewEncoder(w).Encode(texts)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// npmCI installs a package's locked dependencies unless they are there
// (have names a file of node_modules that shows they are).
func npmCI(t *testing.T, dir, have string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", have)); err == nil {
		return
	}
	npm := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	npm.Dir = dir
	if out, err := npm.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s (run make setup for node and npm): %v\n%s", dir, err, out)
	}
}

// runIn runs a command in dir with env, failing the test with its output.
func runIn(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestTypeScript builds the TypeScript client (clients/typescript) and
// runs its tests, unit and integration, against a live runtime, then the
// TypeScript quickstart (examples/typescript) against the same runtime.
func TestTypeScript(t *testing.T) {
	rt := spawnertest.Start(t, nil)
	env := append(append(os.Environ(), rt.Env...), "STUB_CONTROL_URL="+stubControl(t, rt.Stub))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	clientDir := buildTypeScriptClient(t, ctx, env)
	t.Run("client", func(t *testing.T) {
		out := runIn(t, ctx, clientDir, env, "node", "--test", "--test-concurrency=1", "test/unit/", "test/redis/", "test/integration/")
		if !strings.Contains(out, "# fail 0") || strings.Contains(out, "# pass 0") {
			t.Fatalf("node --test:\n%s", out)
		}
		t.Logf("node --test: %s", summary(out))
	})

	// As a newcomer installs it: npm pack's tarball into a fresh project
	// outside the repository, then the README's quickstart as written,
	// compiled there and run.
	t.Run("pack", func(t *testing.T) {
		dir := t.TempDir()
		tgz := strings.TrimSpace(lastLine(runIn(t, ctx, clientDir, env, "npm", "pack", "--pack-destination", dir)))
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name": "fresh", "private": true, "type": "module"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		runIn(t, ctx, dir, env, "npm", "install", "--no-audit", "--no-fund", "./"+tgz, "typescript@5.9.3", "@types/node@20.19.43")
		if err := os.WriteFile(filepath.Join(dir, "quickstart.ts"), []byte(readmeQuickstart(t, filepath.Join(clientDir, "README.md"), "ts")), 0o644); err != nil {
			t.Fatal(err)
		}
		runIn(t, ctx, dir, env, "npx", "tsc", "--strict", "--target", "ES2022", "--module", "NodeNext", "--moduleResolution", "NodeNext", "--types", "node", "quickstart.ts")
		rt.Stub.SetScript(stubmodel.Script{})
		if out := runIn(t, ctx, dir, env, "node", "quickstart.js"); !strings.Contains(out, "complete") {
			t.Fatalf("the packed quickstart printed:\n%s", out)
		}
		testkit.Eventually(t, "the scoped worker deleted", 30*time.Second, func() bool {
			n, _ := rt.RC.SCard(context.Background(), rt.Keys.Workers()).Result()
			return n == 0
		})
	})

	t.Run("quickstart", func(t *testing.T) {
		exampleDir := filepath.Join("typescript")
		npmCI(t, exampleDir, "typescript")
		runIn(t, ctx, exampleDir, env, "npm", "run", "build")
		rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": `worker-wrapper progress --step "Greeting" --pct 100`, "description": "progress"}}},
			{Text: "Hello!\n{\"status\": \"complete\", \"result\": {\"greeting\": \"hello\"}}"},
		}})
		out := runIn(t, ctx, exampleDir, env, "node", "dist/quickstart.js")
		for _, want := range []string{" created (image worker:", "progress: Greeting", `output: complete, result {"greeting":"hello"}`} {
			if !strings.Contains(out, want) {
				t.Errorf("the TypeScript quickstart did not print %q:\n%s", want, out)
			}
		}
		ids, err := rt.RC.SMembers(context.Background(), rt.Keys.Workers()).Result()
		if err != nil || len(ids) != 0 {
			t.Errorf("workers left after the quickstart: %v %v", ids, err)
		}
	})
}

// buildTypeScriptClient installs the client's npm packages when they are
// missing and builds it; it returns the client's directory.
func buildTypeScriptClient(t *testing.T, ctx context.Context, env []string) string {
	t.Helper()
	dir := filepath.Join("..", "clients", "typescript")
	npmCI(t, dir, "ioredis")
	runIn(t, ctx, dir, env, "npm", "run", "build")
	return dir
}

// TestTypeScriptSentinel runs the TypeScript client over a Redis Sentinel
// deployment with passwords on the servers and on the sentinels: its
// redis+sentinel:// URL, WAIT for the replica, a failover, and the primary
// a look for an entry reads across a second one.
func TestTypeScriptSentinel(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "srv-secret", SentinelPassword: "sentinel-secret"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := append(os.Environ(), "SENTINEL_URL="+s.URL())
	dir := buildTypeScriptClient(t, ctx, env)
	// One file at a time: each fails the primary over.
	out := runIn(t, ctx, dir, env, "node", "--test", "--test-concurrency=1", "--test-timeout=90000", "test/sentinel/")
	if !strings.Contains(out, "# fail 0") || strings.Contains(out, "# pass 0") {
		t.Fatalf("node --test:\n%s", out)
	}
	t.Logf("node --test: %s", summary(out))
}

// TestTypeScriptApproval runs the TypeScript client's permission replies
// against a runtime whose workers ask before a tool call ALLOWED_COMMANDS
// does not allow.
func TestTypeScriptApproval(t *testing.T) {
	rt := spawnertest.Start(t, func(c *spawner.Config) {
		c.WorkerEnv = map[string]string{"AGENT_PERSISTENT": "true", "AGENT_APPROVAL": "true"}
	})
	env := append(append(os.Environ(), rt.Env...), "STUB_CONTROL_URL="+stubControl(t, rt.Stub))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := buildTypeScriptClient(t, ctx, env)
	out := runIn(t, ctx, dir, env, "node", "--test", "test/approval/")
	if !strings.Contains(out, "# fail 0") || strings.Contains(out, "# pass 0") {
		t.Fatalf("node --test:\n%s", out)
	}
	t.Logf("node --test: %s", summary(out))
}

// lastLine is the last line of out that is not empty.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// summary is the counting lines of node --test's report.
func summary(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "# tests ") || strings.HasPrefix(l, "# pass ") || strings.HasPrefix(l, "# fail ") {
			lines = append(lines, strings.TrimPrefix(l, "# "))
		}
	}
	return strings.Join(lines, ", ")
}
