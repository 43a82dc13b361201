package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// The wrapper as PID 1 of a real container: a FROM scratch image holding
// only the static wrapper and the static fake agent (as "claude"), so that
// the test needs no registry and no base image.

func docker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func buildTestImage(t *testing.T) string {
	t.Helper()
	testkit.RequireDocker(t)
	ctxDir := t.TempDir()
	for _, f := range []string{bins.wrapper, bins.fake} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(ctxDir, filepath.Base(f)), b, 0o755)
	}
	os.WriteFile(filepath.Join(ctxDir, "notexec"), []byte("not a program"), 0o644)
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(`FROM scratch
COPY worker-wrapper claude notexec /usr/local/bin/
ENV PATH=/usr/local/bin
WORKDIR /workspace
ENTRYPOINT ["/usr/local/bin/worker-wrapper"]
LABEL io.agentvisor.test=1
`), 0o644)
	tag := randomName("agentvisor-pid1-test:")
	if err := testkit.DockerBuild(ctxDir, tag); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(t, "rmi", "-f", tag) })
	return tag
}

func runContainer(t *testing.T, image, name string, env ...string) {
	t.Helper()
	args := []string{"run", "-d", "--name", name, "--network", "host", "--label", "io.agentvisor.test=1", "--stop-timeout", "30"}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	if out, err := docker(t, append(args, image)...); err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	t.Cleanup(func() { docker(t, "rm", "-f", name) })
}

func TestPID1InContainer(t *testing.T) {
	image := buildTestImage(t)
	r, rc := testkit.StartRedisClient(t)
	defer rc.Close()
	keys := protocol.Keys{}

	t.Run("exit paths", func(t *testing.T) {
		tests := []struct {
			name string
			env  []string
			code string
		}{
			{"configuration error", []string{"REDIS_URL=" + r.URL(), "AGENT_TYPE=claude"}, "2"},
			{"agent missing", []string{"WORKER_ID=x1", "REDIS_URL=" + r.URL(), "AGENT_TYPE=claude", "AGENT_BIN=/usr/local/bin/droid"}, "127"},
			{"agent not executable", []string{"WORKER_ID=x2", "REDIS_URL=" + r.URL(), "AGENT_TYPE=claude", "AGENT_BIN=/usr/local/bin/notexec"}, "126"},
		}
		for _, tt := range tests {
			name := randomName("pid1-exit-")
			runContainer(t, image, name, tt.env...)
			code, err := docker(t, "wait", name)
			if err != nil || code != tt.code {
				logs, _ := docker(t, "logs", name)
				t.Errorf("%s: exit %q (%v), want %s\n%s", tt.name, code, err, tt.code, logs)
			}
		}
	})

	t.Run("orphans reaped, SIGTERM stops cleanly", func(t *testing.T) {
		name := randomName("pid1-")
		runContainer(t, image, name, "WORKER_ID="+name, "REDIS_URL="+r.URL(), "AGENT_TYPE=claude", "HEARTBEAT_INTERVAL=1")
		// Right after `docker run -d` the container's process may still be
		// runc's init; PID 1 becomes the wrapper once it has exec'd.
		testkit.Eventually(t, "worker-wrapper as the container's process", 10*time.Second, func() bool {
			out, _ := docker(t, "top", name, "-o", "pid,comm")
			return strings.Contains(out, "worker-wrapper")
		})
		sendTask(t, rc, keys.Input(name), protocol.Task{RequestID: "orphans", Prompt: "fake:orphans"})
		testkit.Eventually(t, "the output", 30*time.Second, func() bool { return len(outputs(t, rc, keys.Output(name))) == 1 })
		if o := outputs(t, rc, keys.Output(name))[0]; o.Status != protocol.StatusComplete {
			t.Fatalf("output %+v", o)
		}
		time.Sleep(800 * time.Millisecond) // the orphans sleep 300 ms
		testkit.Eventually(t, "no zombies in the container", 10*time.Second, func() bool {
			out, err := docker(t, "top", name, "-o", "pid,stat,comm")
			return err == nil && !strings.Contains(out, " Z") && strings.Count(out, "\n") == 1
		})
		if out, err := docker(t, "kill", "-s", "TERM", name); err != nil {
			t.Fatalf("docker kill: %v %s", err, out)
		}
		code, err := docker(t, "wait", name)
		if err != nil || code != "0" {
			logs, _ := docker(t, "logs", name)
			t.Fatalf("exit %q (%v) after SIGTERM, want 0\n%s", code, err, logs)
		}
		logs, _ := docker(t, "logs", name)
		if !strings.Contains(logs, `"orphans_reaped":100`) {
			t.Errorf("PID 1 did not reap the 100 orphans:\n%s", logs)
		}
		st, _ := rc.HGet(context.Background(), keys.Status(name), "status").Result()
		if st != "stopped" || !strings.HasSuffix(events(rc), "stopping,stopped") {
			t.Errorf("status %q, lifecycle %s", st, events(rc))
		}
	})
}
