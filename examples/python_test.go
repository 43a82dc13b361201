package examples

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// python is Debian's interpreter, which has python3-redis (a pyenv
// python3 first on PATH may not).
const python = "/usr/bin/python3"

// TestPythonClient runs the Python client against a live runtime: the
// Python quickstart (examples/python), then the client's unittest suite
// (clients/python/tests), whose live cases script the stub model through
// a loopback endpoint of this test (STUB_SCRIPT_URL). Workers ask their
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
	env = append(env, "PYTHONPATH="+clientDir, "PYTHONDONTWRITEBYTECODE=1", "STUB_SCRIPT_URL="+scriptEndpoint(t, rt.Stub), "AGENTVISOR_LIVE=1")

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

// scriptEndpoint serves, on a loopback port, POST /script: a stub model
// script as JSON (stubmodel.Script), given to the runtime's stub.
func scriptEndpoint(t *testing.T, stub *stubmodel.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s stubmodel.Script
		if r.Method != http.MethodPost || r.URL.Path != "/script" {
			http.Error(w, "POST /script", http.StatusNotFound)
			return
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		stub.SetScript(s)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/script"
}
