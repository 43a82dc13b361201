package examples

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// composeImages are the tags the compose test builds the example's images
// under (never the defaults an operator's build.sh makes).
var composeImages = []string{"MANAGER_IMAGE=agentvisor/compose-test-manager:latest",
	"GATEWAY_IMAGE=agentvisor/compose-test-gateway:latest", "REDIS_IMAGE=agentvisor/compose-test-redis:latest"}

// countLabelled counts what `docker <args>` lists (one id a line).
func countLabelled(t *testing.T, args ...string) int {
	t.Helper()
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
	}
	return len(strings.Fields(string(out)))
}

// The compose example (examples/compose) brought up with images built
// here, two workers made busy (the fake agent sleeping in a task), then
// `docker-compose down`: no container and no volume of the key prefix is
// left, and none of the compose project.
func TestComposeDownLeavesNothing(t *testing.T) {
	testkit.RequireDocker(t) // the engine held shared: a test that restarts it waits
	composeBin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatal("docker-compose is not installed (scripts/setup.sh installs Debian's docker-compose)")
	}
	dir, err := filepath.Abs("compose")
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command(filepath.Join(dir, "build.sh"))
	build.Env = append(os.Environ(), composeImages...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	const base = "agentvisor/worker-base-compose:latest"
	if err := testkit.BuildFakeAgentImage(base, "worker-base-compose"); err != nil {
		t.Fatal(err)
	}
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("cmp%d", time.Now().UnixNano())
	gwDir, err := os.MkdirTemp("", "cgw") // short: a unix socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), composeImages...)
	env = append(env, "MANAGER_PASSWORD=manager-"+prefix, "CONSUMER_PASSWORD=consumer-"+prefix, fmt.Sprintf("REDIS_PORT=%d", port),
		"WORKER_KEY_PREFIX="+prefix, "GATEWAY_DIR="+gwDir, "GATEWAY_MODEL=", "WORKER_BASE_IMAGE="+base,
		`WORKER_ENV={"AGENT_BIN":"`+testkit.FakeAgentBin+`"}`, "WORKER_STOP_TIMEOUT=12s", "METRICS_ADDR=off")
	compose := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, composeBin, append([]string{"-p", prefix, "-f", filepath.Join(dir, "compose.yaml")}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := compose(time.Minute, "logs", "--no-color", "--tail", "60")
			t.Logf("compose logs:\n%s", out)
		}
		_, _ = compose(3*time.Minute, "down", "-v", "--timeout", "5")
		testkit.RemoveLabelled(testkit.KeyPrefixLabel(prefix))
		_ = os.RemoveAll(gwDir)
	})
	if out, err := compose(5*time.Minute, "up", "-d"); err != nil {
		t.Fatalf("docker-compose up: %v\n%s", err, out)
	}

	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Username: "consumer", Password: "consumer-" + prefix})
	t.Cleanup(func() { rc.Close() })
	keys, err := protocol.NewKeys(prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The manager's container may still be starting: a command sent
	// before its presence is written would fail NO_MANAGER.
	testkit.Eventually(t, "the manager's presence", 2*time.Minute, func() bool {
		return rc.SCard(ctx, keys.Managers()).Val() > 0
	})
	cmds := &client.Commands{Redis: rc, Keys: keys, Timeout: 5 * time.Minute}
	tasks := &client.Tasks{Redis: rc, Keys: keys}
	var ids []string
	for _, project := range []string{"compose-a", "compose-b"} {
		r, err := cmds.Do(ctx, protocol.Command{Action: protocol.ActionCreate,
			Spec: &protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: project}})
		if err != nil {
			t.Fatalf("create in %s: %v", project, err)
		}
		if _, err := tasks.Send(ctx, r.WorkerID, protocol.Task{RequestID: "busy-" + project, Prompt: "fake:sleep-600000"}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.WorkerID)
	}
	testkit.Eventually(t, "both workers busy", time.Minute, func() bool {
		for _, id := range ids {
			if rc.HGet(ctx, keys.Status(id), protocol.StatusFieldState).Val() != string(protocol.WorkerBusy) {
				return false
			}
		}
		return true
	})
	label := "label=" + testkit.KeyPrefixLabel(prefix)
	workers := countLabelled(t, "ps", "-aq", "--filter", label, "--filter", "label="+protocol.LabelWorkerID)
	if v := countLabelled(t, "volume", "ls", "-q", "--filter", label); workers != 2 || v != 2 {
		t.Fatalf("before down: %d worker containers, %d volumes of the prefix", workers, v)
	}

	start := time.Now()
	if out, err := compose(3*time.Minute, "down"); err != nil {
		t.Fatalf("docker-compose down: %v\n%s", err, out)
	}
	t.Logf("docker-compose down took %v", time.Since(start).Round(time.Millisecond))
	if c := countLabelled(t, "ps", "-aq", "--filter", label); c != 0 {
		t.Errorf("after down: %d containers of the prefix left", c)
	}
	if v := countLabelled(t, "volume", "ls", "-q", "--filter", label); v != 0 {
		t.Errorf("after down: %d volumes of the prefix left", v)
	}
	if c := countLabelled(t, "ps", "-aq", "--filter", "label=com.docker.compose.project="+prefix); c != 0 {
		t.Errorf("after down: %d containers of the compose project left", c)
	}
}
