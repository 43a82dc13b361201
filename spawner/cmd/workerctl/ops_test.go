package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/spf13/pflag"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/testkit"
)

// Help, completion and flag spelling need no Redis.
func TestWorkerctlHelpAndCompletion(t *testing.T) {
	runCtl := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, _ := runCtl("--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, cmd := range []string{"list", "status", "events", "spawn", "send", "pause", "resume", "kill", "usage", "budget",
		"managers", "reconcile", "reset-context", "gc", "volumes", "completion"} {
		if !strings.Contains(out, "\n  "+cmd+" ") {
			t.Errorf("--help does not list %s:\n%s", cmd, out)
		}
	}
	// Every flag of every command has its help text.
	root := newRoot(&ctl{})
	for _, c := range root.Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.TrimSpace(f.Usage) == "" {
				t.Errorf("%s --%s has no help", c.Name(), f.Name)
			}
		})
	}
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if strings.TrimSpace(f.Usage) == "" {
			t.Errorf("--%s has no help", f.Name)
		}
	})
	if code, out, _ := runCtl("-h"); code != exitOK || !strings.Contains(out, "Exit codes") {
		t.Errorf("-h: exit %d\n%s", code, out)
	}
	if code, out, _ := runCtl("send", "-help"); code != exitOK || !strings.Contains(out, "--wait") || !strings.Contains(out, "--timeout") {
		t.Errorf("send -help: exit %d\n%s", code, out)
	}
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if code, out, _ := runCtl("completion", shell); code != exitOK || !strings.Contains(out, "workerctl") {
			t.Errorf("completion %s: exit %d", shell, code)
		}
	}
	if _, out, _ := runCtl("__complete", "spawn", "--agent", ""); !strings.Contains(out, "claude\ndroid\n") {
		t.Errorf("completion of --agent:\n%s", out)
	}
	if _, out, _ := runCtl("__complete", "spawn", "--cap", ""); !strings.Contains(out, "GIT\n") {
		t.Errorf("completion of --cap:\n%s", out)
	}
	if code, _, errs := runCtl("reset-context", "shop", "--agent", "gpt"); code != exitUsage {
		t.Errorf("reset-context --agent gpt: exit %d %s", code, errs)
	}
	for _, args := range [][]string{
		{"budget", "--limit", "5"},                        // no project
		{"budget", "shop", "--warn", "1"},                 // --warn without --limit
		{"budget", "shop", "--limit", "5", "--warn", "6"}, // warning above the limit
		{"budget", "shop", "--limit", "-1"},
		{"budget", "a", "b"},
	} {
		if code, _, errs := runCtl(args...); code != exitUsage {
			t.Errorf("%s: exit %d, want %d (%s)", strings.Join(args, " "), code, exitUsage, errs)
		}
	}
	if code, _, errs := runCtl("--redis", "http://nope", "list"); code != exitUsage || !strings.Contains(errs, "--redis") {
		t.Errorf("a bad --redis: exit %d %s", code, errs)
	}
	if code, _, errs := runCtl("--redis", "redis+sentinel://:s3cret@127.0.0.1:1", "list"); code != exitUsage ||
		!strings.Contains(errs, "needs the master's name") || strings.Contains(errs, "s3cret") {
		t.Errorf("a sentinel URL without its master: exit %d %s", code, errs)
	}
}

// A sentinel URL reaches the primary through the sentinels: workerctl
// lists (no worker yet) and sends a create command that waits for the
// replica (a manager's presence but no manager: it times out, exit 6,
// after the command was added on both servers).
func TestWorkerctlSentinelURL(t *testing.T) {
	s := testkit.StartSentinel(t, testkit.SentinelOptions{Password: "pw"})
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--redis", s.URL(), "list"}, &out, &errb); code != exitOK {
		t.Fatalf("list through the sentinels: exit %d %s", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	// A manager's presence (that writes nothing else), so that the
	// command is sent.
	if p, err := s.Primary(); err != nil {
		t.Fatal(err)
	} else if _, err := p.Do("HSET", "sent:manager:m1", "id", "m1"); err != nil {
		t.Fatal(err)
	} else if _, err := p.Do("SADD", "sent:managers", "m1"); err != nil {
		t.Fatal(err)
	}
	code := run(context.Background(), []string{"--redis", s.URL(), "--prefix", "sent", "spawn", "--agent", "claude", "--timeout", "1s"}, &out, &errb)
	if code != exitTimeout || strings.Contains(errb.String(), "sentinel:") {
		t.Fatalf("spawn with no manager: exit %d %s", code, errb.String())
	}
	p, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Do("XLEN", "sent:commands"); err != nil || n != ":1" {
		t.Fatalf("the command stream on the primary: %q, %v", n, err)
	}
	for _, r := range s.Servers[1:] {
		if n, err := r.Do("XLEN", "sent:commands"); err != nil || n != ":1" {
			t.Fatalf("the command stream on the replica %s: %q, %v", r.Addr, n, err)
		}
	}
}

// The operator commands against a live runtime: managers, reconcile
// (which removes an orphan container), gc --dry-run (which removes
// nothing), reset-context, and worker id completion.
func TestWorkerctlOperators(t *testing.T) {
	rt := spawnertest.Start(t, nil)
	must := mustRun(t, rt)
	id := strings.TrimSpace(must(exitOK, "spawn", "--agent", "claude", "--project", "ops"))

	// managers: the runtime's manager, holding the leader lease.
	var ms []spawner.ManagerState
	deadline := time.Now().Add(20 * time.Second)
	for {
		ms = nil
		if err := json.Unmarshal([]byte(must(exitOK, "--json", "managers")), &ms); err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 && len(ms[0].Leases) == 2 && !ms[0].LastReconcileAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("managers: %+v", ms)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The only manager holds the fleet's lease and its host's.
	if ms[0].PID == 0 || ms[0].Host == "" || ms[0].Leases[0] != ctlplane.LeaderLease || ms[0].Leases[1] != ctlplane.HostLeaderLease(ms[0].Host) {
		t.Errorf("manager state %+v", ms[0])
	}
	if out := must(exitOK, "managers"); !strings.HasPrefix(out, "MANAGER") || !strings.Contains(out, ms[0].ID) || !strings.Contains(out, "leader") {
		t.Errorf("managers:\n%s", out)
	}

	// reconcile: an unknown labelled container of this prefix is removed,
	// the worker is left alone.
	orphan, err := exec.Command("docker", "create", "--label", protocol.LabelManaged+"=true", "--label", protocol.LabelKeyPrefix+"="+rt.Keys.Prefix,
		"--label", protocol.LabelWorkerID+"=orphan-1", images.DefaultBaseImage).Output()
	if err != nil {
		t.Fatalf("docker create: %v", err)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", strings.TrimSpace(string(orphan))).Run() })
	t.Setenv("CREATION_GRACE", "1ms")
	var rep spawner.ReconcileReport
	if err := json.Unmarshal([]byte(must(exitOK, "--json", "reconcile")), &rep); err != nil || rep.OrphansRemoved != 1 || rep.WorkersKnown != 1 {
		t.Errorf("reconcile: %+v %v", rep, err)
	}
	if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "id="+strings.TrimSpace(string(orphan))).Output(); len(bytes.TrimSpace(out)) != 0 {
		t.Error("the orphan container is still there")
	}
	if out := must(exitOK, "reconcile"); !strings.Contains(out, "orphans removed") {
		t.Errorf("reconcile:\n%s", out)
	}
	must(exitOK, "status", id[:8])

	// gc --dry-run: the worker's image is stale at a 1ns retention but in
	// use; nothing is removed.
	var gc images.GCReport
	if err := json.Unmarshal([]byte(must(exitOK, "--json", "gc", "--dry-run", "--retention", "1ns")), &gc); err != nil || !gc.DryRun || len(gc.Removed) != 0 || len(gc.KeptInUse) != 1 {
		t.Errorf("gc --dry-run: %+v %v", gc, err)
	}
	if out := must(exitOK, "gc", "-dry-run"); !strings.Contains(out, "would remove") {
		t.Errorf("gc -dry-run:\n%s", out)
	}

	// reset-context goes through the manager.
	rt.RC.HSet(context.Background(), rt.Keys.Session(protocol.AgentClaude, "ops"), "session_id", "s1")
	must(exitOK, "reset-context", "ops", "--agent", "claude")
	if n := rt.RC.Exists(context.Background(), rt.Keys.Session(protocol.AgentClaude, "ops")).Val(); n != 0 {
		t.Error("reset-context left the session")
	}

	// budget: none yet; set through the manager (the set_budget command),
	// shown with what the project spent (its usage counter), removed.
	var budgets []budgetRow
	if err := json.Unmarshal([]byte(must(exitOK, "--json", "budget")), &budgets); err != nil || len(budgets) != 0 {
		t.Errorf("budget with none set: %+v (%v)", budgets, err)
	}
	must(exitOK, "budget", "ops", "--limit", "0.5", "--warn", "0.25")
	rt.RC.HSet(context.Background(), rt.Keys.UsageProject("ops"), protocol.UsageFieldCostUSD, "0.3")
	if err := json.Unmarshal([]byte(must(exitOK, "--json", "budget")), &budgets); err != nil || len(budgets) != 1 ||
		budgets[0] != (budgetRow{ProjectID: "ops", LimitUSD: 0.5, WarnUSD: 0.25, SpentUSD: 0.3}) {
		t.Errorf("budget after --limit: %+v (%v)", budgets, err)
	}
	if out := must(exitOK, "budget", "ops"); !strings.HasPrefix(strings.TrimSpace(out), "PROJECT") || !strings.Contains(out, "0.5000") ||
		!strings.Contains(out, "0.3000") || !strings.Contains(out, "warning") {
		t.Errorf("budget ops:\n%s", out)
	}
	if lim := rt.RC.HGet(context.Background(), rt.Keys.ProjectBudget("ops"), protocol.BudgetFieldLimitUSD).Val(); lim != "0.5" {
		t.Errorf("the budget hash's limit is %q", lim)
	}
	rt.RC.HSet(context.Background(), rt.Keys.UsageProject("ops"), protocol.UsageFieldCostUSD, "0.5")
	if out := must(exitOK, "budget", "ops"); !strings.Contains(out, "exceeded") {
		t.Errorf("budget ops at its limit:\n%s", out)
	}
	must(exitOK, "budget", "ops", "--limit", "0")
	if out := must(exitOK, "budget"); strings.Contains(out, "ops") {
		t.Errorf("budget after its removal:\n%s", out)
	}
	if out := must(exitOK, "budget", "ops"); !strings.Contains(out, "none") {
		t.Errorf("budget ops after its removal:\n%s", out)
	}
	if code, _, errs := ctlRun(rt, "-prefix", "nobody", "budget", "x", "--limit", "1", "--timeout", "1s"); code != exitNoManager {
		t.Errorf("budget --limit with no manager: exit %d, %s", code, errs)
	}

	// Worker ids complete from Redis.
	if _, out, _ := ctlRun(rt, "__complete", "status", id[:4]); !strings.Contains(out, id+"\n") {
		t.Errorf("completion of a worker id:\n%s", out)
	}
}

// Without --redis and REDIS_URL, workerctl takes the project's consumer
// URL (REDIS_CONSUMER_URL, here from the environment rather than the
// credentials file of scripts/redis.sh).
func TestWorkerctlDefaultsToTheConsumerURL(t *testing.T) {
	r := testkit.StartRedisWith(t, testkit.RedisOptions{Password: "consumer-pw"})
	t.Setenv("REDIS_URL", "")
	t.Setenv("REDIS_CONSUMER_URL", r.URL())
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"list"}, &out, &errb); code != exitOK {
		t.Fatalf("list with REDIS_CONSUMER_URL: exit %d %s", code, errb.String())
	}
}
