package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/wrapper/internal/testbin"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// Black-box tests of the worker-wrapper binary: its exit codes, its
// signals, and (in container_test.go) its life as PID 1 of a container.

var bins struct{ dir, wrapper, fake string }

func TestMain(m *testing.M) {
	testbin.Main(func() int {
		bins.wrapper, bins.fake = filepath.Join(bins.dir, "worker-wrapper"), filepath.Join(bins.dir, "claude")
		return m.Run()
	}, map[string]string{"worker-wrapper": testbin.Wrapper, "claude": testbin.FakeAgent}, &bins.dir)
}

func baseEnv(redisURL string, t testing.TB) []string {
	return []string{"WORKER_ID=bb-1", "REDIS_URL=" + redisURL, "AGENT_TYPE=claude", "AGENT_BIN=" + bins.fake,
		"WORKSPACE=" + t.TempDir(), "HEARTBEAT_INTERVAL=1", "PATH=/usr/bin:/bin", "KILL_GRACE=500ms", "RESULT_GRACE=500ms"}
}

func runWrapper(t *testing.T, env []string, timeout time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.wrapper)
	cmd.Env = env
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

func TestExitCodes(t *testing.T) {
	r := testkit.StartRedis(t)
	notExec := filepath.Join(t.TempDir(), "claude")
	os.WriteFile(notExec, []byte("not a program"), 0o644)
	tests := []struct {
		name    string
		env     func([]string) []string
		code    int
		message string
	}{
		{"no WORKER_ID", func(e []string) []string { return e[1:] }, 2, "WORKER_ID"},
		{"bad REDIS_URL", func(e []string) []string { return append(e, "REDIS_URL=http://x") }, 2, "REDIS_URL"},
		{"bad AGENT_TYPE", func(e []string) []string { return append(e, "AGENT_TYPE=cursor") }, 2, "AGENT_TYPE"},
		{"bad ALLOWED_COMMANDS", func(e []string) []string { return append(e, "ALLOWED_COMMANDS=eng*") }, 2, "ALLOWED_COMMANDS"},
		{"bad TASK_TIMEOUT", func(e []string) []string { return append(e, "TASK_TIMEOUT=soon") }, 2, "TASK_TIMEOUT"},
		{"bad MODEL_PRICES", func(e []string) []string {
			return append(e, `MODEL_PRICES={"agentvisor": {"input": 3, "output": 15, "cache_read": -1, "cache_write": 1}}`)
		}, 2, `config: MODEL_PRICES: protocol: model prices: model \"agentvisor\": cache_read: is -1`},
		{"agent missing", func(e []string) []string { return append(e, "AGENT_BIN=/nonexistent/claude") }, 127, "not found"},
		{"agent not executable", func(e []string) []string { return append(e, "AGENT_BIN="+notExec) }, 126, "not executable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runWrapper(t, tt.env(baseEnv(r.URL(), t)), 10*time.Second)
			if code != tt.code || !strings.Contains(out, tt.message) {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tt.code, out)
			}
		})
	}
	// A failed exec is recorded for the spawner.
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()
	st, _ := rc.HGetAll(context.Background(), protocol.Keys{}.Status("bb-1")).Result()
	if st["status"] != "failed" || st["exit_code"] != "126" {
		t.Errorf("status after a failed exec: %v", st)
	}
	if code, out := runWrapper(t, nil, 5*time.Second); code != 2 {
		t.Errorf("empty environment: exit %d\n%s", code, out)
	}
	cmd := exec.Command(bins.wrapper, "bogus")
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("unknown command: %v", err)
	}
}

// startWrapper runs the binary in the background.
func startWrapper(t testing.TB, env []string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	var out strings.Builder
	cmd := exec.Command(bins.wrapper)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &out
}

func sendTask(t testing.TB, rc *redis.Client, stream string, task protocol.Task) {
	doc, _ := task.Encode()
	if err := rc.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
		t.Fatal(err)
	}
}

func outputs(t testing.TB, rc *redis.Client, stream string) []protocol.Output {
	msgs, _ := rc.XRange(context.Background(), stream, "-", "+").Result()
	var outs []protocol.Output
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if _, typ, _ := protocol.PeekType(data); typ == protocol.TypeOutput {
			o, err := protocol.DecodeOutput(data)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, o)
		}
	}
	return outs
}

// events lists the lifecycle's milestones in order: every event but the
// state_changed ones, which record each transition between them.
func events(rc *redis.Client) string {
	msgs, _ := rc.XRange(context.Background(), protocol.Keys{}.Lifecycle(), "-", "+").Result()
	var evs []string
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		l, _ := protocol.DecodeLifecycle(data)
		if l.Event != protocol.EventStateChanged {
			evs = append(evs, string(l.Event))
		}
	}
	return strings.Join(evs, ",")
}

// zombieChildren lists zombie processes whose parent is pid.
func zombieChildren(pid int) []string {
	var z []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[0] == "Z" && f[1] == fmt.Sprint(pid) {
			z = append(z, e.Name())
		}
	}
	return z
}

func TestSubreaperReapsOrphansAndSIGTERMStopsCleanly(t *testing.T) {
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	cmd, out := startWrapper(t, baseEnv(r.URL(), t))
	keys := protocol.Keys{}
	sendTask(t, rc, keys.Input("bb-1"), protocol.Task{RequestID: "orphans", Prompt: "fake:orphans"})
	testkit.Eventually(t, "the output", 15*time.Second, func() bool { return len(outputs(t, rc, keys.Output("bb-1"))) == 1 })
	if o := outputs(t, rc, keys.Output("bb-1"))[0]; o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v", o)
	}
	// The sleepers the agent left (half of them outside its process group)
	// exit after 300 ms; none may stay a zombie.
	time.Sleep(800 * time.Millisecond)
	testkit.Eventually(t, "no zombies", 5*time.Second, func() bool { return len(zombieChildren(cmd.Process.Pid)) == 0 })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("no exit 10 s after SIGTERM:\n%s", out)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, out)
	}
	if !strings.Contains(out.String(), `"orphans_reaped":`) || strings.Contains(out.String(), `"orphans_reaped":0`) {
		t.Errorf("orphans not reported as reaped:\n%s", out)
	}
	if evs := events(rc); !strings.HasSuffix(evs, "stopping,stopped") {
		t.Errorf("lifecycle %s", evs)
	}
}

func TestSecondSIGTERMCutsTheGraceShort(t *testing.T) {
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	cmd, out := startWrapper(t, append(baseEnv(r.URL(), t), "SHUTDOWN_GRACE=60s"))
	keys := protocol.Keys{}
	sendTask(t, rc, keys.Input("bb-1"), protocol.Task{RequestID: "stuck", Prompt: "fake:ignore-sigterm"})
	testkit.Eventually(t, "the task to start", 10*time.Second, func() bool { return strings.Contains(events(rc), "task_started") })
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("exit %v after %v:\n%s", err, time.Since(start), out)
	}
	outs := outputs(t, rc, keys.Output("bb-1"))
	if len(outs) != 1 || outs[0].Error == nil || outs[0].Error.Code != protocol.CodeTerminated {
		t.Fatalf("outputs %+v", outs)
	}
}
