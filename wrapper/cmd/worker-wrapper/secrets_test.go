package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// The secrets the escape tests plant: a Redis password and a model API key.
const password, apiKey = "redis-pass-5f0c9a7e", "sk-ant-api-secret-4b1d7c2e"

// secretServices starts a Redis that takes only password, a client of it,
// and a stub model.
func secretServices(t *testing.T) (*testkit.Redis, *redis.Client, *stubmodel.Server) {
	t.Helper()
	r := testkit.StartRedisWith(t, testkit.RedisOptions{Password: password})
	rc := r.Client(t)
	stub, err := stubmodel.Start(stubmodel.Script{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	return r, rc, stub
}

// TestAgentFindsNoSecret runs the wrapper as PID 1 of a container with the
// spawner's settings (uid 1000, no capabilities, no-new-privileges) and a
// Redis password and a model API key in its environment. The agent, the
// fake agent's snoop mode under the same uid, tries /proc/1/environ,
// cmdline, mem, fd, ptrace, every process's environ and cmdline, its own
// environment and its home directory: it finds neither secret.
func TestAgentFindsNoSecret(t *testing.T) {
	image := buildTestImage(t)
	r, rc, stub := secretServices(t)

	workspace := t.TempDir()
	if err := os.Chmod(workspace, 0o777); err != nil { // writable by the container's uid 1000
		t.Fatal(err)
	}
	name := randomName("pid1-snoop-")
	args := []string{"run", "-d", "--name", name, "--network", "host", "--label", "io.agentvisor.test=1",
		"--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"-v", workspace + ":/workspace"}
	for _, e := range []string{"WORKER_ID=" + name, "REDIS_URL=" + r.URL(), "AGENT_TYPE=claude",
		"ANTHROPIC_API_KEY=" + apiKey, "ANTHROPIC_BASE_URL=" + stub.URL} {
		args = append(args, "-e", e)
	}
	if out, err := docker(t, append(args, image)...); err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	t.Cleanup(func() { docker(t, "rm", "-f", name) })

	keys := protocol.Keys{}
	sendTask(t, rc, keys.Input(name), protocol.Task{RequestID: "snoop", Prompt: "fake:snoop"})
	testkit.Eventually(t, "the output", 30*time.Second, func() bool { return len(outputs(t, rc, keys.Output(name))) == 1 })
	if o := outputs(t, rc, keys.Output(name))[0]; o.Status != protocol.StatusComplete {
		logs, _ := docker(t, "logs", name)
		t.Fatalf("output %+v (error %+v)\n%s", o, o.Error, logs)
	}
	b, err := os.ReadFile(filepath.Join(workspace, "snoop.txt"))
	if err != nil {
		t.Fatalf("the agent wrote no report: %v", err)
	}
	report := string(b)
	for _, secret := range []string{password, apiKey, "REDIS_URL"} {
		if strings.Contains(report, secret) {
			t.Errorf("the agent found %q:\n%s", secret, report)
		}
	}
	// Each way in was tried, and refused; what is readable was read.
	for _, want := range []string{
		"== /proc/1/environ: error: open /proc/1/environ: permission denied",
		"== /proc/1/mem: error: open /proc/1/mem: permission denied",
		"== /proc/1/fd: error: open /proc/1/fd: permission denied",
		"== /proc/1/maps: error: open /proc/1/maps: permission denied",
		"== ptrace attach 1: error: operation not permitted",
		"== /proc/1/cmdline: read ",
		"== own environment: read ",
		"ANTHROPIC_API_KEY=agentvisor-proxy-",
		"ANTHROPIC_BASE_URL=http://127.0.0.1:",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "ANTHROPIC_BASE_URL="+stub.URL) {
		t.Errorf("the agent got the upstream's URL, not the proxy's")
	}

	// The wrapper still works as PID 1 after its re-execution: SIGTERM
	// stops it cleanly.
	if out, err := docker(t, "kill", "-s", "TERM", name); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	if code, err := docker(t, "wait", name); err != nil || code != "0" {
		logs, _ := docker(t, "logs", name)
		t.Fatalf("exit %q (%v) after SIGTERM, want 0\n%s", code, err, logs)
	}
	st, _ := rc.HGet(context.Background(), keys.Status(name), "status").Result()
	if st != "stopped" {
		t.Errorf("status %q after SIGTERM", st)
	}
}

// TestRealAgentsFindNoSecret runs the wrapper binary as a process under
// uid 1000 (the test runs as root, as `make test` does) with the real
// claude, droid, codex and qwen, whose scripted shell tool call tries the
// wrapper's /proc files, its own environment and its settings: the tool's
// output, as the stub model gets it, holds neither the Redis password nor
// the API key, and every model call arrived with the real key, added by
// the wrapper's proxy.
func TestRealAgentsFindNoSecret(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the wrapper under uid 1000 and needs root for that (make test runs as root)")
	}
	tests := []struct {
		agent protocol.AgentType
		tool  func(command string) *stubmodel.ToolUse
		home  string // the agent's own settings
		token string // how the proxy's token shows in its environment or settings
	}{
		{protocol.AgentClaude,
			func(c string) *stubmodel.ToolUse {
				return &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": c, "description": "look around"}}
			},
			"~/.claude.json ~/.claude/settings.json", "ANTHROPIC_API_KEY=agentvisor-proxy-"},
		{protocol.AgentDroid,
			func(c string) *stubmodel.ToolUse {
				return &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{"command": c, "riskLevel": "low", "riskLevelReason": "reads files"}}
			},
			"~/.factory/settings.json", `"apiKey": "agentvisor-proxy-`},
		{protocol.AgentCodex,
			func(c string) *stubmodel.ToolUse {
				return &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": c}} // the stub maps it to exec_command
			},
			"~/.codex/config.toml", "AGENTVISOR_MODEL_TOKEN=agentvisor-proxy-"},
		{protocol.AgentQwen,
			func(c string) *stubmodel.ToolUse {
				return &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": c}} // the stub maps it to run_shell_command
			},
			`"$QWEN_CODE_SYSTEM_SETTINGS_PATH"`, "OPENAI_API_KEY=agentvisor-proxy-"},
	}
	for _, tt := range tests {
		t.Run(string(tt.agent), func(t *testing.T) {
			bin, err := exec.LookPath(string(tt.agent))
			if err != nil {
				t.Fatalf("the real %s CLI is not installed (run `make setup`): %v", tt.agent, err)
			}
			r, rc, stub := secretServices(t)
			stub.SetAPIKey(apiKey)
			wrapper, home, workspace := uid1000Dirs(t)
			workerID := "snoop-" + string(tt.agent)
			cmd := exec.Command(wrapper)
			cmd.Env = append([]string{"WORKER_ID=" + workerID, "REDIS_URL=" + r.URL(), "AGENT_TYPE=" + string(tt.agent),
				"AGENT_BIN=" + bin, "WORKSPACE=" + workspace, "HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin",
				"ANTHROPIC_API_KEY=" + apiKey, "RESULT_GRACE=2",
				"ALLOWED_COMMANDS=*"}, stubModelEnv(tt.agent, stub.URL, apiKey)...) // the worst case: the agent may run anything
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			pid := strconv.Itoa(cmd.Process.Pid)

			snoop := "for f in environ cmdline maps mem; do echo \"== $f\"; head -c 4096 /proc/" + pid + "/$f 2>&1 | tr '\\0' '\\n'; done; " +
				"echo '== fd'; ls -l /proc/" + pid + "/fd 2>&1; echo '== env'; env; echo '== home'; cat " + tt.home + " 2>&1"
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
				{ToolUse: tt.tool(snoop)},
				{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"},
			}})
			keys := protocol.Keys{}
			sendTask(t, rc, keys.Input(workerID), protocol.Task{RequestID: "snoop", Prompt: "Look around."})
			testkit.Eventually(t, "the output", 90*time.Second, func() bool { return len(outputs(t, rc, keys.Output(workerID))) == 1 })
			if o := outputs(t, rc, keys.Output(workerID))[0]; o.Status != protocol.StatusComplete {
				t.Fatalf("output %+v (error %+v)\n%s", o, o.Error, out.String())
			}
			reqs := stub.Requests()
			if len(reqs) < 2 || len(stub.OtherRequests()) != 0 {
				t.Fatalf("%d requests, refused or other: %q", len(reqs), stub.OtherRequests())
			}
			for i, req := range reqs {
				if !req.KeyOK {
					t.Errorf("request %d arrived without the real key", i)
				}
			}
			seen := reqs[len(reqs)-1].Text()
			for _, secret := range []string{password, apiKey, "REDIS_URL", stub.URL} {
				if strings.Contains(seen, secret) {
					t.Errorf("the agent found %q:\n%s", secret, seen)
				}
			}
			for _, want := range []string{"== environ\nhead: cannot open", "== mem\nhead: cannot open", "== maps\nhead: cannot open",
				"Permission denied", "== env\n", tt.token} {
				if !strings.Contains(seen, want) {
					t.Errorf("the tool's output lacks %q:\n%s", want, seen)
				}
			}
		})
	}
}

// uid1000Dirs makes what a wrapper run under uid 1000 needs: its own copy
// of the wrapper binary (the test binaries' directory is root's), a home
// and a workspace.
func uid1000Dirs(t *testing.T) (wrapper, home, workspace string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "agentvisor-uid1000-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	wrapper, home, workspace = filepath.Join(dir, "worker-wrapper"), filepath.Join(dir, "home"), filepath.Join(dir, "workspace")
	b, err := os.ReadFile(bins.wrapper)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{os.Chmod(dir, 0o755), os.WriteFile(wrapper, b, 0o755), os.Mkdir(home, 0o700), os.Mkdir(workspace, 0o755),
		os.Chown(home, 1000, 1000), os.Chown(workspace, 1000, 1000)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return wrapper, home, workspace
}
