package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/protocol/testkit"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// TestAgentFindsNoSecret runs the wrapper as PID 1 of a container with the
// spawner's settings (uid 1000, no capabilities, no-new-privileges) and a
// Redis password and a model API key in its environment. The agent, the
// fake agent's snoop mode under the same uid, tries /proc/1/environ,
// cmdline, mem, fd, ptrace, every process's environ and cmdline, its own
// environment and its home directory: it finds neither secret.
func TestAgentFindsNoSecret(t *testing.T) {
	image := buildTestImage(t)
	const password, apiKey = "redis-pass-5f0c9a7e", "sk-ant-api-secret-4b1d7c2e"
	r := testkit.StartRedisWith(t, testkit.RedisOptions{Password: password})
	rc := redis.NewClient(&redis.Options{Addr: r.Addr, Password: password})
	defer rc.Close()
	stub, err := stubmodel.Start(stubmodel.Script{})
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()

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
