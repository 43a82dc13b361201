package images

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/testkit"
)

// The images of images/ (make images), built by their scripts
// (testkit.WorkerImages, with testkit.BuildSecret in the builds'
// environment): the OS base from debootstrap with no registry, and
// worker-base.

func run(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestWorkerBaseImage(t *testing.T) {
	testkit.WorkerImages(t)
	const img = "agentvisor/worker-base:latest"

	if id := run(t, nil, "docker", "run", "--rm", "--entrypoint", "/usr/bin/id", img); !strings.HasPrefix(id, "uid=1000(worker) gid=1000(worker)") {
		t.Errorf("runs as %q, want uid 1000", id)
	}
	if out := run(t, nil, "docker", "run", "--rm", "--entrypoint", "/bin/sh", img, "-c", "test -w /workspace && test -w $HOME && echo ok"); out != "ok" {
		t.Errorf("workspace or home not writable by the user: %q", out)
	}

	// The wrapper is PID 1 and stops cleanly on SIGTERM.
	r := testkit.StartRedis(t)
	name := "agentvisor-image-test-" + strings.ReplaceAll(time.Now().Format("150405.000"), ".", "")
	run(t, nil, "docker", "run", "-d", "--name", name, "--network", "host", "-e", "WORKER_ID="+name,
		"-e", "REDIS_URL="+r.URL(), "-e", "AGENT_TYPE=claude", "-e", "AGENT_BIN=/bin/true", img)
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", name).Run() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("docker", "exec", name, "cat", "/proc/1/cmdline").Output()
		if strings.HasPrefix(string(out), "/usr/local/bin/worker-wrapper") {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
			t.Fatalf("PID 1 is %q, want the worker-wrapper\n%s", out, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	run(t, nil, "docker", "kill", "-s", "TERM", name)
	if code := run(t, nil, "docker", "wait", name); code != "0" {
		t.Errorf("exit %s after SIGTERM, want 0", code)
	}

	// No secret in any layer or in the history.
	for _, image := range []string{"agentvisor/os-base:bookworm", img} {
		if h := run(t, nil, "docker", "history", "--no-trunc", image); strings.Contains(h, testkit.BuildSecret) {
			t.Errorf("%s: the API key is in the image history", image)
		}
		cmd := exec.Command("docker", "save", image)
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		found, err := contains(stdout, []byte(testkit.BuildSecret))
		cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if found {
			t.Errorf("%s: the API key is in a layer", image)
		}
	}
}

// contains scans r for needle without holding all of it.
func contains(r io.Reader, needle []byte) (bool, error) {
	buf := make([]byte, 1<<20)
	carry := []byte{}
	for {
		n, err := r.Read(buf)
		chunk := append(carry, buf[:n]...)
		if bytes.Contains(chunk, needle) {
			return true, nil
		}
		if len(chunk) >= len(needle) {
			carry = append([]byte{}, chunk[len(chunk)-len(needle)+1:]...)
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}
