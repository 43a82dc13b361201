package examples

import (
	"bufio"
	"io"
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

// python is Debian's interpreter, which has python3-redis (a pyenv
// python3 first on PATH may not).
const python = "/usr/bin/python3"

// TestPythonClient runs the Python client against a live runtime: the
// Python quickstart (examples/python), then the client's unittest suite
// (clients/python/tests), whose live cases script the stub model through
// a loopback endpoint of this test (STUB_SCRIPT_URL: stubControl's POST /script). Workers ask their
// owner before a tool call ALLOWED_COMMANDS does not allow and keep
// their agent process between tasks, so that approval, steering and a
// fast cancel can be exercised.
func TestPythonClient(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import redis, redis.asyncio.sentinel; print(redis.__version__)").CombinedOutput(); err != nil {
		t.Fatalf("%s lacks python3-redis (apt-get install python3-redis): %v\n%s", python, err, out)
	}
	rt := spawnertest.Start(t, func(c *spawner.Config) {
		c.WorkerEnv = map[string]string{"AGENT_PERSISTENT": "true", "AGENT_APPROVAL": "true"}
	})
	clientDir, err := filepath.Abs("../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), rt.Env...)
	env = append(env, "PYTHONPATH="+clientDir, "PYTHONDONTWRITEBYTECODE=1", "STUB_SCRIPT_URL="+stubControl(t, rt.Stub)+"/script", "AGENTVISOR_LIVE=1")

	t.Run("quickstart", func(t *testing.T) {
		rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
			{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": `worker-wrapper progress --step "Greeting" --pct 100`, "description": "progress"}}},
			{Text: "Hello!\n{\"status\": \"complete\", \"result\": {\"greeting\": \"hello\"}}"},
		}})
		cmd := exec.Command(python, "python/quickstart.py")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		got := string(out)
		for _, want := range []string{"worker ", " created", "progress: Greeting", `output: complete, result {"greeting": "hello"}`, "deleted"} {
			if !strings.Contains(got, want) {
				t.Errorf("the Python quickstart did not print %q", want)
			}
		}
		if err != nil || t.Failed() {
			t.Fatalf("python quickstart: %v\n%s", err, got)
		}
	})

	// The README's quickstart, as written: a scoped worker, a task, its
	// output.
	t.Run("readme", func(t *testing.T) {
		rt.Stub.SetScript(stubmodel.Script{})
		cmd := exec.Command(python, "-c", readmeQuickstart(t, filepath.Join(clientDir, "README.md"), "python"))
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "complete") {
			t.Fatalf("the README's quickstart: %v\n%s", err, out)
		}
		testkit.Eventually(t, "the scoped worker deleted", 30*time.Second, func() bool {
			n, _ := rt.RC.SCard(t.Context(), rt.Keys.Workers()).Result()
			return n == 0
		})
	})

	// Installed as a newcomer would on Debian 12 (PEP 668: no pip into
	// the system): a copy outside the repository, into a venv that sees
	// Debian's redis-py, offline; then the quickstart from elsewhere,
	// without PYTHONPATH.
	t.Run("install", func(t *testing.T) {
		dir := t.TempDir()
		copyTree(t, clientDir, filepath.Join(dir, "src"), "tests", "__pycache__")
		for _, c := range [][]string{
			{python, "-m", "venv", "--system-site-packages", filepath.Join(dir, "venv")},
			{filepath.Join(dir, "venv", "bin", "pip"), "install", "-q", "--no-build-isolation", "--no-index", filepath.Join(dir, "src")},
		} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
			}
		}
		rt.Stub.SetScript(stubmodel.Script{})
		cmd := exec.Command(filepath.Join(dir, "venv", "bin", "python"), "-c", readmeQuickstart(t, filepath.Join(clientDir, "README.md"), "python")+
			"import agentvisor, os\nassert os.path.exists(os.path.join(os.path.dirname(agentvisor.__file__), 'py.typed'))\n")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), rt.Env...)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "complete") {
			t.Fatalf("the installed package: %v\n%s", err, out)
		}
	})

	t.Run("unittest", func(t *testing.T) {
		cmd := exec.Command(python, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
		cmd.Dir, cmd.Env = clientDir, env
		out, err := cmd.CombinedOutput()
		got := string(out)
		if err != nil || !strings.Contains(got, "\nOK") || strings.Contains(got, "skipped") {
			t.Fatalf("python -m unittest: %v\n%s", err, got)
		}
		if !strings.Contains(got, "test_live") {
			t.Fatalf("the live tests did not run:\n%s", got)
		}
		t.Logf("%s", got)
	})
}

// TestPythonClientDeveloperQueue runs the Python client's developer
// worker case (clients/python/tests/live_developer.py) against a runtime of
// its own: TestPythonClient's workers are persistent, which a developer
// worker cannot be. A task of high priority goes to its queue and is
// cancelled through the normal one; a task of low priority completes.
func TestPythonClientDeveloperQueue(t *testing.T) {
	rt := spawnertest.Start(t, nil)
	clientDir, err := filepath.Abs("../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "unittest", "-v", "tests.live_developer")
	cmd.Dir = clientDir
	cmd.Env = append(append(os.Environ(), rt.Env...), "PYTHONPATH="+clientDir, "PYTHONDONTWRITEBYTECODE=1", "STUB_SCRIPT_URL="+stubControl(t, rt.Stub)+"/script")
	out, err := cmd.CombinedOutput()
	got := string(out)
	if err != nil || !strings.Contains(got, "\nOK") || !strings.Contains(got, "test_priorities_and_control_on_the_developer_queue") {
		t.Fatalf("python -m unittest tests.live_developer: %v\n%s", err, got)
	}
	t.Logf("%s", got)
}

// sentinelScript sends a task through a redis+sentinel:// URL, waits for a
// line on stdin (the test fails the primary over meanwhile), then sends
// another: the client follows the new primary.
const sentinelScript = `
import os, sys
from agentvisor import Client
c = Client.from_url(os.environ["SENTINEL_URL"], prefix="sn")
assert c.wait.replicas == 1, c.wait
c.redis.hset("sn:status:w1", mapping={"kind": "long_lived"})
for rid in ("r1", "r2"):
    t = c.send("w1", "hello", request_id=rid)
    print("sent", t.request_id, c.run(rid).status, flush=True)
    if rid == "r1":
        sys.stdin.readline()
`

// TestPythonClientSentinel connects the Python client through Redis
// Sentinel (with the servers' and the sentinels' passwords): a task sent
// with WAIT for a replica, a failover, a task sent to the new primary.
func TestPythonClientSentinel(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "srv-pw", SentinelPassword: "sn-pw"})
	old, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	clientDir, err := filepath.Abs("../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", sentinelScript)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+clientDir, "SENTINEL_URL="+s.URL(), "REDIS_WAIT_TIMEOUT=2s")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "sent r1 requested" {
		cmd.Wait()
		t.Fatalf("before the failover: %q\n%s", lines.Text(), stderr.String())
	}
	if err := s.Failover(); err != nil {
		t.Fatal(err)
	}
	primary, err := s.WaitNewPrimary(old, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	if !lines.Scan() || lines.Text() != "sent r2 requested" {
		cmd.Wait()
		t.Fatalf("after the failover: %q\n%s", lines.Text(), stderr.String())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	// Both tasks are on the new primary: r1 replicated before the
	// failover (WAIT), r2 written there.
	entries, err := primary.DoArray("XRANGE", "sn:w1:input", "-", "+")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(entries, " ")
	for _, want := range []string{`"request_id":"r1"`, `"request_id":"r2"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the new primary's input stream lacks %s: %s", want, got)
		}
	}
}

// TestPythonClientSentinelLook runs tests/live_sentinel.py against a Redis
// Sentinel deployment of its own (passwords on the servers and on the
// sentinels): across a failover, the primary the sync and asyncio clients
// look for an entry on after a short WAIT is never the old one once the
// replica is promoted, is "not yet" during the failover, then the new one.
func TestPythonClientSentinelLook(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "srv-pw", SentinelPassword: "sn-pw"})
	clientDir, err := filepath.Abs("../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "unittest", "-v", "tests.live_sentinel")
	cmd.Dir = clientDir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+clientDir, "PYTHONDONTWRITEBYTECODE=1", "SENTINEL_URL="+s.URL())
	out, err := cmd.CombinedOutput()
	got := string(out)
	if err != nil || !strings.Contains(got, "\nOK") || !strings.Contains(got, "test_the_look_never_reads_the_old_primary_after_a_promotion") {
		t.Fatalf("python -m unittest tests.live_sentinel: %v\n%s", err, got)
	}
	t.Logf("%s", got)
}
