package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/testkit"
)

// downRun runs workerctl against rt with stdin as its input.
func downRun(rt *spawnertest.Runtime, stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	full := append([]string{"--redis", rt.RedisURL, "--prefix", rt.Keys.Prefix}, args...)
	code := runWith(context.Background(), strings.NewReader(stdin), full, &out, &errb)
	return code, out.String(), errb.String()
}

// labelled counts the containers and volumes of a runtime's key prefix:
// Docker's volumes and the project volumes that are disks (the default
// disk limit).
func labelled(t *testing.T, rt *spawnertest.Runtime) (containers, volumes int) {
	t.Helper()
	prefix := rt.Keys.Prefix
	count := func(args ...string) int {
		out, err := exec.Command("docker", args...).Output()
		if err != nil {
			t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
		}
		return len(strings.Fields(string(out)))
	}
	f := "label=" + testkit.KeyPrefixLabel(prefix)
	disks, _ := filepath.Glob(filepath.Join(rt.DiskDir, prefix, "volumes", "*.img"))
	return count("ps", "-aq", "--filter", f), count("volume", "ls", "-q", "--filter", f) + len(disks)
}

// workerUsers returns the Redis users of a key prefix's workers.
func workerUsers(t *testing.T, rt *spawnertest.Runtime) []string {
	t.Helper()
	users, err := rt.RC.ACLUsers(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range users {
		if strings.HasPrefix(u, "agentvisor:"+rt.Keys.Prefix+":") {
			out = append(out, u)
		}
	}
	return out
}

// With its manager gone, down removes every container, volume, Redis
// user and gateway directory of the prefix, after a question (declined:
// nothing goes) or with --yes; a second run finds nothing; Redis or an
// engine that does not answer is exit 7.
func TestWorkerctlDown(t *testing.T) {
	rt := spawnertest.Start(t, nil)
	t.Setenv("GATEWAY_DIR", rt.GatewayDir)
	must := mustRun(t, rt)
	ids := []string{
		strings.TrimSpace(must(exitOK, "spawn", "--agent", "claude", "--project", "down-a")),
		strings.TrimSpace(must(exitOK, "spawn", "--agent", "claude", "--project", "down-b")),
	}
	rt.StopManager()
	gw := gateway.NewClient(rt.GatewayDir)
	// The workers' containers, and the holders of the sealed workers'
	// network namespaces (theirs and spare ones).
	if c, v := labelled(t, rt); c < 2 || v != 2 {
		t.Fatalf("before down: %d containers, %d volumes", c, v)
	}
	before, _ := labelled(t, rt)
	if u := workerUsers(t, rt); len(u) != 2 {
		t.Fatalf("before down: Redis users %v", u)
	}
	served, err := gw.Workers(context.Background())
	if err != nil || len(served) != 2 {
		t.Fatalf("before down: the gateway serves %v (%v)", served, err)
	}

	code, out, errs := downRun(rt, "n\n", "down")
	if code != exitFailed || !strings.Contains(errs, "[y/N]") ||
		!strings.Contains(errs, fmt.Sprintf("will remove %d container(s), 2 volume(s), 2 Redis user(s), 2 gateway", before)) {
		t.Fatalf("down, declined: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if c, v := labelled(t, rt); c != before || v != 2 {
		t.Fatalf("a declined down removed something: %d containers, %d volumes left", c, v)
	}

	code, out, errs = downRun(rt, "y\n", "down")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("removed %d container(s), 2 volume(s), 2 Redis user(s), 2 gateway", before)) {
		t.Fatalf("down: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	for _, id := range ids {
		if !strings.Contains(out, id) {
			t.Errorf("down does not name worker %s:\n%s", id, out)
		}
	}
	if c, v := labelled(t, rt); c != 0 || v != 0 {
		t.Errorf("after down: %d containers, %d volumes left", c, v)
	}
	if u := workerUsers(t, rt); len(u) != 0 {
		t.Errorf("after down: Redis users %v", u)
	}
	if served, err := gw.Workers(context.Background()); err != nil || len(served) != 0 {
		t.Errorf("after down: the gateway serves %v (%v)", served, err)
	}

	var again spawner.DownPlan
	code, out, errs = downRun(rt, "", "--json", "down", "--yes")
	if code != exitOK || json.Unmarshal([]byte(out), &again) != nil || !again.Empty() {
		t.Errorf("a second down: exit %d %s %s", code, out, errs)
	}

	if code, _, errs := downRun(&spawnertest.Runtime{RedisURL: "redis://127.0.0.1:1", Keys: rt.Keys}, "", "down", "--yes"); code != exitUnreachable ||
		!strings.Contains(errs, "Redis did not answer") {
		t.Errorf("down with Redis unreachable: exit %d %s", code, errs)
	}
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	if code, _, errs := downRun(rt, "", "down", "--yes"); code != exitUnreachable || !strings.Contains(errs, "engine did not answer") {
		t.Errorf("down with the engine unreachable: exit %d %s", code, errs)
	}
}
