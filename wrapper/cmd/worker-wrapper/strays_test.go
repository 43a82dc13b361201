package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
	"github.com/redis/go-redis/v9"
)

// running reports whether pid runs (a zombie, or no process, does not).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// strayPIDs waits for the pids a task's tool wrote into file.
func strayPIDs(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	testkit.Eventually(t, "the tool's pids in "+filepath.Base(file), time.Minute, func() bool {
		b, err := os.ReadFile(file)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) >= n
	})
	return pids
}

// noneRunning fails unless every pid is gone within a second of the
// task's output: the output's consumer may start the next task at once.
func noneRunning(t *testing.T, what string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for _, pid := range pids {
		for running(pid) {
			if time.Now().After(deadline) {
				t.Errorf("%s: process %d still runs a second after the task's output", what, pid)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func cancelTask(t *testing.T, rc *redis.Client, stream, requestID string) {
	t.Helper()
	doc, _ := protocol.NewCancel(requestID, "test").Encode()
	if err := rc.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)}).Err(); err != nil {
		t.Fatal(err)
	}
}

func waitOutput(t *testing.T, rc *redis.Client, stream, requestID string) protocol.Output {
	t.Helper()
	var out protocol.Output
	testkit.Eventually(t, "the output of "+requestID, time.Minute, func() bool {
		for _, o := range outputs(t, rc, stream) {
			if o.RequestID == requestID {
				out = o
				return true
			}
		}
		return false
	})
	return out
}

// A task's end, its cancel and its timeout each leave none of the
// processes it started running, in whatever process group or session they
// went: the wrapper, as their reaper, kills them.
func TestNoProcessOfATaskOutlivesIt(t *testing.T) {
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	env := baseEnv(r.URL(), t)
	workspace := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "WORKSPACE="); ok {
			workspace = v
		}
	}
	startWrapper(t, env)
	keys := protocol.Keys{}
	in, out := keys.Input("bb-1"), keys.Output("bb-1")
	pidfile := filepath.Join(workspace, "strays.pids")

	sendTask(t, rc, in, protocol.Task{RequestID: "ends", Prompt: "fake:strays"})
	if o := waitOutput(t, rc, out, "ends"); o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v", o)
	}
	noneRunning(t, "a task's end", strayPIDs(t, pidfile, 2))

	_ = os.Remove(pidfile)
	sendTask(t, rc, in, protocol.Task{RequestID: "cancelled", Prompt: "fake:strays fake:sleep-30000"})
	pids := strayPIDs(t, pidfile, 2)
	cancelTask(t, rc, in, "cancelled")
	if o := waitOutput(t, rc, out, "cancelled"); o.Status != protocol.StatusCancelled {
		t.Fatalf("output %+v", o)
	}
	noneRunning(t, "a cancel", pids)

	_ = os.Remove(pidfile)
	sendTask(t, rc, in, protocol.Task{RequestID: "timed-out", Prompt: "fake:strays fake:sleep-30000", TimeoutSeconds: 1})
	pids = strayPIDs(t, pidfile, 2)
	if o := waitOutput(t, rc, out, "timed-out"); o.Status != protocol.StatusFailed {
		t.Fatalf("output %+v", o)
	}
	noneRunning(t, "a timeout", pids)
}

// The real claude runs its Bash tool in a process group of its own: a
// cancel of a task whose tool sleeps (and left a sleeper in a session of
// its own) leaves neither, and a task whose tool detached a sleeper leaves
// none at its end. A persistent claude, spared, serves the next task.
func TestRealClaudeLeavesNoToolProcess(t *testing.T) {
	claude, stub := claudeAndStub(t)
	for _, persistent := range []bool{false, true} {
		t.Run("persistent="+strconv.FormatBool(persistent), func(t *testing.T) {
			r, rc := testkit.StartRedisClient(t)
			defer rc.Close()
			workspace := t.TempDir()
			env := []string{"HOME=" + t.TempDir(), "PATH=/usr/local/bin:/usr/bin:/bin", "ANTHROPIC_BASE_URL=" + stub.URL,
				"ANTHROPIC_API_KEY=x", "WORKER_ID=st-1", "REDIS_URL=" + r.URL(), "AGENT_TYPE=claude", "AGENT_BIN=" + claude,
				"WORKSPACE=" + workspace, "PAUSE_AFTER_OUTPUT=false", "ALLOWED_COMMANDS=*", "RESULT_GRACE=2",
				"AGENT_PERSISTENT=" + strconv.FormatBool(persistent)}
			cmd, _ := startWrapper(t, env)
			// Stopped before its directories go: a persistent claude
			// writes its session files until the wrapper stops it.
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				done := make(chan struct{})
				go func() { _, _ = cmd.Process.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(15 * time.Second):
				}
			})
			keys := protocol.Keys{}
			in, out := keys.Input("st-1"), keys.Output("st-1")
			pidfile := filepath.Join(workspace, "strays.pids")
			bash := func(command string) *stubmodel.ToolUse {
				return &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": command, "description": "sleep"}}
			}
			done := stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"}

			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
				{ToolUse: bash("setsid sleep 301 >/dev/null 2>&1 & echo $! > strays.pids; echo $$ >> strays.pids; sleep 302")},
				done,
			}})
			sendTask(t, rc, in, protocol.Task{RequestID: "cancelled", Prompt: "Sleep."})
			pids := strayPIDs(t, pidfile, 2)
			cancelTask(t, rc, in, "cancelled")
			if o := waitOutput(t, rc, out, "cancelled"); o.Status != protocol.StatusCancelled {
				t.Fatalf("output %+v", o)
			}
			noneRunning(t, "the real claude's cancelled Bash tool", pids)

			_ = os.Remove(pidfile)
			stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
				{ToolUse: bash("setsid sleep 303 >/dev/null 2>&1 & echo $! > strays.pids")},
				done,
			}})
			sendTask(t, rc, in, protocol.Task{RequestID: "ends", Prompt: "Detach a sleeper."})
			if o := waitOutput(t, rc, out, "ends"); o.Status != protocol.StatusComplete {
				t.Fatalf("output %+v (error %+v)", o, o.Error)
			}
			noneRunning(t, "the real claude's detached sleeper", strayPIDs(t, pidfile, 1))
		})
	}
}
