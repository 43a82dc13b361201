package seal

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// helperArg makes the test binary, run again by a test, call Seal and
// print what it got instead of running the tests. It is an argument, not
// a variable: the re-executed image gets the same arguments.
const helperArg = "seal-test-helper"

type report struct {
	Environ     []string // what Seal returned
	ProcEnviron string   // /proc/self/environ after Seal
	Dumpable    int
	OpenFDs     []string
	Pid         int
}

func TestMain(m *testing.M) {
	if len(os.Args) < 2 || os.Args[1] != helperArg {
		os.Exit(m.Run())
	}
	environ, err := Seal()
	if err != nil {
		os.Stderr.WriteString(err.Error())
		os.Exit(1)
	}
	var r report
	r.Environ = environ
	b, _ := os.ReadFile("/proc/self/environ")
	r.ProcEnviron = string(b)
	r.Dumpable, _ = unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		r.OpenFDs = append(r.OpenFDs, target)
	}
	r.Pid = os.Getpid()
	_ = json.NewEncoder(os.Stdout).Encode(r)
	os.Exit(0)
}

func runHelper(t *testing.T, env ...string) (report, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], helperArg)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/tmp"}, env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	return r, cmd.Process.Pid
}

func TestSealHidesTheEnvironment(t *testing.T) {
	big := strings.Repeat("x", 100<<10) // larger than a pipe's buffer
	r, pid := runHelper(t, "REDIS_URL=redis://:hunter2@127.0.0.1:6379/0", "ANTHROPIC_API_KEY=sk-secret", "INSTRUCTIONS="+big)
	if r.Pid != pid {
		t.Errorf("pid %d after the re-execution, want %d (the same process)", r.Pid, pid)
	}
	get := Getenv(r.Environ)
	if get("REDIS_URL") != "redis://:hunter2@127.0.0.1:6379/0" || get("ANTHROPIC_API_KEY") != "sk-secret" ||
		get("INSTRUCTIONS") != big || get("PATH") != "/usr/bin:/bin" || get(EnvFD) != "" {
		t.Errorf("Seal returned an environment that lacks the original's variables")
	}
	for _, secret := range []string{"hunter2", "sk-secret", "REDIS_URL", "INSTRUCTIONS"} {
		if strings.Contains(r.ProcEnviron, secret) {
			t.Errorf("/proc/self/environ holds %q", secret)
		}
	}
	if !strings.Contains(r.ProcEnviron, "PATH=/usr/bin:/bin") {
		t.Errorf("/proc/self/environ lost PATH: %q", r.ProcEnviron)
	}
	if r.Dumpable != 0 {
		t.Errorf("dumpable %d after Seal, want 0", r.Dumpable)
	}
	for _, fd := range r.OpenFDs {
		if strings.Contains(fd, "memfd") {
			t.Errorf("the environment's memfd is still open: %v", r.OpenFDs)
		}
	}
}

func TestSealWithoutSecrets(t *testing.T) {
	r, _ := runHelper(t, "LANG=C.UTF-8")
	if Getenv(r.Environ)("LANG") != "C.UTF-8" || r.Dumpable != 0 {
		t.Errorf("environ %q, dumpable %d", r.Environ, r.Dumpable)
	}
}

func TestKeep(t *testing.T) {
	tests := []struct {
		name, value string
		keep        bool
	}{
		{"PATH", "/bin", true},
		{"LC_ALL", "C", true},
		{"REDIS_URL", "redis://x", false},
		{"WORKER_ID", "w1", false},
		{"HTTPS_PROXY", "http://proxy:3128", true},
		{"HTTPS_PROXY", "http://user:pw@proxy:3128", false},
	}
	for _, tt := range tests {
		if got := Keep(tt.name, tt.value); got != tt.keep {
			t.Errorf("Keep(%s=%s) = %v, want %v", tt.name, tt.value, got, tt.keep)
		}
	}
}
