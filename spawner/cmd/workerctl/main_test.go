package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// ctlRun runs workerctl against the runtime and returns its exit code and
// outputs.
func ctlRun(rt *spawnertest.Runtime, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	full := append([]string{"-redis", rt.RedisURL, "-prefix", rt.Keys.Prefix}, args...)
	code := run(context.Background(), full, &out, &errb)
	return code, out.String(), errb.String()
}

// mustRun returns a runner of workerctl that fails the test on an exit
// code other than the one wanted, and returns the standard output.
func mustRun(t *testing.T, rt *spawnertest.Runtime) func(want int, args ...string) string {
	return func(want int, args ...string) string {
		t.Helper()
		code, out, errs := ctlRun(rt, args...)
		if code != want {
			t.Fatalf("workerctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
		}
		return out
	}
}

func TestWorkerctl(t *testing.T) {
	rt := spawnertest.Start(t, nil)
	must := mustRun(t, rt)

	// Bad usage and unknown workers have their own exit codes.
	must(exitUsage)
	must(exitUsage, "frobnicate")
	must(exitUsage, "spawn", "-agent", "gpt")
	must(exitUsage, "spawn", "-agent", "claude", "--runtime", "kata")
	must(exitUsage, "send", "only-one-arg")
	must(exitNotFound, "status", "no-such-worker")
	must(exitNotFound, "kill", "no-such-worker")

	id := strings.TrimSpace(must(exitOK, "spawn", "-agent", "claude", "-project", "shop", "-allow", protocol.ProgressCommand))
	short := id[:8]

	// A complete task, with progress through the shell tool: exit 0.
	rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": `worker-wrapper progress --step "Half way" --pct 50`, "description": "progress"}}},
		{Text: "Done.\n{\"status\": \"complete\", \"result\": {\"answer\": 42}}"},
	}})
	out := must(exitOK, "send", short, "Do it.", "-wait", "-id", "t1", "-retry", "2")
	if !strings.Contains(out, `"Half way" 50%`) || !strings.Contains(out, `{"answer":42}`) {
		t.Errorf("send -wait printed:\n%s", out)
	}
	if run := rt.RC.HGetAll(context.Background(), rt.Keys.Run("t1")).Val(); run["trigger"] != "manual" || run["agent_slug"] != "claude" || run["attempt"] != "1" {
		t.Errorf("the run of a task sent by workerctl: %v", run)
	}
	// Blocked: exit 4; failed: exit 5; -json prints the Output.
	rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "{\"status\": \"blocked\", \"question\": \"Which DB?\"}"}}})
	var o protocol.Output
	if err := json.Unmarshal([]byte(must(exitBlocked, "-json", "send", id, "Persist it.", "-wait")), &o); err != nil || o.Question != "Which DB?" {
		t.Errorf("blocked output %+v (%v)", o, err)
	}
	rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Error: &stubmodel.HTTPError{Status: 400, Message: "prompt is too long"}, Repeat: 20}}})
	must(exitTaskFail, "send", id, "Anything.", "-wait")

	// list and status, for people and as JSON.
	if out := must(exitOK, "list"); !strings.Contains(out, short) || !strings.Contains(out, "shop") || !strings.HasPrefix(out, "WORKER") {
		t.Errorf("list:\n%s", out)
	}
	var rows []workerRow
	if err := json.Unmarshal([]byte(must(exitOK, "-json", "list")), &rows); err != nil || len(rows) != 1 || rows[0].WorkerID != id {
		t.Fatalf("list -json: %+v (%v)", rows, err)
	}
	// The worker's host: the engine's name (no HOST_ID), in the HOST column.
	if out := must(exitOK, "list"); rows[0].Host == "" || !strings.Contains(out, "HOST") || !strings.Contains(out, rows[0].Host) {
		t.Errorf("list without the worker's host %q:\n%s", rows[0].Host, out)
	}
	var row workerRow
	if err := json.Unmarshal([]byte(must(exitOK, "-json", "status", short)), &row); err != nil || row.AgentType != protocol.AgentClaude || row.ProjectID != "shop" {
		t.Errorf("status -json: %+v (%v)", row, err)
	}

	// network: its egress allowlist (workers are sealed by default); bad
	// lists are usage errors; a change is in force and shown at once.
	if out := must(exitOK, "network", short); !strings.Contains(out, "no egress") {
		t.Errorf("network of a worker without an allowlist: %q", out)
	}
	must(exitUsage, "network", short, "--allow", "*")
	must(exitUsage, "network", short, "--allow", "a.test", "--none")
	if out := must(exitOK, "network", short, "--allow", "a.test"); !strings.Contains(out, "a.test") {
		t.Errorf("set_network: %q", out)
	}
	if out := must(exitOK, "network", short); !strings.Contains(out, "a.test") {
		t.Errorf("network after set_network: %q", out)
	}

	// events: what the streams hold, in order, this worker's only.
	ev := must(exitOK, "events", "-worker", short)
	for _, want := range []string{"lifecycle created", "progress  t1", "output    t1 complete", "blocked \"Which DB?\"", "failed AGENT_ERROR"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lacks %q:\n%s", want, ev)
		}
	}
	if strings.Index(ev, "lifecycle created") > strings.Index(ev, "output    t1") {
		t.Errorf("events out of order:\n%s", ev)
	}
	lines := strings.Split(strings.TrimSpace(must(exitOK, "-json", "events", "-worker", short)), "\n")
	for _, l := range lines {
		if _, typ, err := protocol.PeekType([]byte(l)); err != nil || typ == "" {
			t.Errorf("events -json line %q is not a protocol document", l)
		}
	}

	// usage sums the project's three tasks.
	var usage []usageRow
	if err := json.Unmarshal([]byte(must(exitOK, "-json", "usage")), &usage); err != nil || len(usage) != 1 || usage[0].ProjectID != "shop" || usage[0].Tasks != 3 {
		t.Errorf("usage: %+v (%v)", usage, err)
	}

	// Cancelled: a cancel ends the task send --wait waits for; it ended as
	// its owner asked, so exit 0, the output saying cancelled.
	rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{Text: "late", DelayMS: 60_000}},
		Fallback: &stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"}})
	type ran struct {
		code      int
		out, errs string
	}
	done := make(chan ran, 1)
	go func() {
		code, out, errs := ctlRun(rt, "send", short, "CANCEL-ME long job", "--wait", "--id", "t-cancel")
		done <- ran{code, out, errs}
	}()
	testkit.Eventually(t, "the model asked for the task to cancel", time.Minute, func() bool {
		for _, r := range rt.Stub.Requests() {
			if strings.Contains(r.Text(), "CANCEL-ME") {
				return true
			}
		}
		return false
	})
	tasks := &client.Tasks{Redis: rt.RC, Keys: rt.Keys}
	if err := tasks.Cancel(context.Background(), client.Sent{RequestID: "t-cancel", WorkerID: id, Input: rt.Keys.Input(id)}, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != exitOK || !strings.Contains(r.out, "cancelled") || !strings.Contains(r.out, "CANCELLED") {
			t.Errorf("send --wait of a cancelled task: exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.errs)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("send --wait still waits after the cancel")
	}
	// The worker reads the cancel entry in its turn too: until then it
	// has an entry waiting, and a pause would be refused WORKER_BUSY.
	testkit.Eventually(t, "the cancel entry read", 30*time.Second, func() bool {
		gs, err := rt.RC.XInfoGroups(context.Background(), rt.Keys.Input(id)).Result()
		return err == nil && len(gs) == 1 && gs[0].Lag == 0 && gs[0].Pending == 0
	})

	// volumes: the project's volume, labelled with its owner.
	var vols []spawner.Volume
	if err := json.Unmarshal([]byte(must(exitOK, "-json", "volumes")), &vols); err != nil || len(vols) != 1 || vols[0].ProjectID != "shop" {
		t.Errorf("volumes: %+v (%v)", vols, err)
	}
	if out := must(exitOK, "volumes"); !strings.HasPrefix(out, "VOLUME") || !strings.Contains(out, "shop") {
		t.Errorf("volumes:\n%s", out)
	}

	// pause, resume and kill go through the manager.
	must(exitOK, "pause", short)
	if out := must(exitOK, "status", short); !strings.Contains(out, "paused") {
		t.Errorf("status after pause:\n%s", out)
	}
	must(exitOK, "resume", short)
	must(exitOK, "kill", short)
	if out := must(exitOK, "-json", "list"); strings.Contains(out, id) {
		t.Errorf("killed worker still listed:\n%s", out)
	}

	// No manager on this prefix: a command fails at once with exit 8,
	// NO_MANAGER, long before its timeout, and nothing is sent.
	start := time.Now()
	code, _, errs := ctlRun(rt, "-prefix", "nobody", "spawn", "-agent", "claude", "-timeout", "5m")
	if code != exitNoManager || !strings.Contains(errs, "NO_MANAGER: client: no worker-manager is alive") {
		t.Errorf("spawn with no manager: exit %d, %s", code, errs)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("spawn with no manager took %v", took)
	}
	if n := rt.RC.XLen(context.Background(), "nobody:commands").Val(); n != 0 {
		t.Errorf("%d commands sent with no manager alive", n)
	}
}

// spawn's project image flags reach the manager: a devcontainer.json on a
// base the manager does not allow is refused with IMAGE_NOT_ALLOWED, and
// a file that cannot be read is a usage error.
func TestSpawnProjectImage(t *testing.T) {
	rt := spawnertest.Start(t, nil)
	must := mustRun(t, rt)
	dir := t.TempDir()
	dev := filepath.Join(dir, "devcontainer.json")
	if err := os.WriteFile(dev, []byte(`{"image": "not-allowed:1", // the project's
	}`), 0o644); err != nil {
		t.Fatal(err)
	}
	must(exitUsage, "spawn", "-agent", "claude", "-devcontainer", filepath.Join(dir, "missing.json"))
	must(exitUsage, "spawn", "-agent", "claude", "-devcontainer", dev, "-image", "debian")
	code, _, errs := ctlRun(rt, "spawn", "-agent", "claude", "-devcontainer", dev)
	if code != exitFailed || !strings.Contains(errs, string(protocol.CodeImageNotAllowed)) || !strings.Contains(errs, "not-allowed:1") {
		t.Fatalf("spawn on a base not allowed: exit %d, stderr %s", code, errs)
	}
}
