package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// cancel ends a running task; Ctrl-C on send --wait, answered yes, does
// too; both print the cancelled output and exit 0.
func TestWorkerctlCancel(t *testing.T) {
	rt := spawnertest.Start(t, nil)
	must := mustRun(t, rt)
	id := strings.TrimSpace(must(exitOK, "spawn", "--agent", "claude", "--project", "cancels"))
	// Every answer of the model takes a minute: a task runs until cancelled.
	rt.Stub.SetScript(stubmodel.Script{Fallback: &stubmodel.Step{Text: "late\n{\"status\": \"complete\", \"result\": {}}", DelayMS: 60000}})
	running := func(req string) {
		t.Helper()
		testkit.Eventually(t, "task "+req+" running", 60*time.Second, func() bool {
			return rt.RC.HGet(context.Background(), rt.Keys.Status(id), protocol.StatusFieldRequestID).Val() == req
		})
	}

	// cancel WORKER: the task in flight.
	must(exitOK, "send", id, "wait a minute", "--id", "r-cancel")
	running("r-cancel")
	start := time.Now()
	if out := must(exitOK, "cancel", id, "--wait"); !strings.Contains(out, "cancelled") {
		t.Errorf("cancel --wait printed:\n%s", out)
	}
	t.Logf("cancel --wait answered in %v", time.Since(start))
	testkit.Eventually(t, "the worker idle", 20*time.Second, func() bool {
		return rt.RC.HGet(context.Background(), rt.Keys.Status(id), protocol.StatusFieldRequestID).Val() == ""
	})
	if code, _, errs := ctlRun(rt, "cancel", id); code != exitFailed || !strings.Contains(errs, "no task in flight") {
		t.Errorf("cancel of an idle worker: exit %d, %s", code, errs)
	}
	if code, _, _ := ctlRun(rt, "cancel"); code != exitUsage {
		t.Errorf("cancel without a worker: exit %d, want %d", code, exitUsage)
	}

	// Ctrl-C on send --wait, answered y: the task is cancelled.
	ctx, interrupt := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runWith(ctx, strings.NewReader("y\n"), []string{"-redis", rt.RedisURL, "-prefix", rt.Keys.Prefix,
			"send", id, "wait again", "--id", "r-interrupt", "--wait"}, &out, &errb)
	}()
	running("r-interrupt")
	interrupt()
	select {
	case code := <-done:
		if code != exitOK || !strings.Contains(out.String(), "cancelled") || !strings.Contains(errb.String(), "Cancel the task too?") {
			t.Errorf("send --wait interrupted and answered y: exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatal("send --wait did not end within 40 s of the interrupt")
	}

	// Answered no (an empty line): the task goes on, exit 1.
	ctx, interrupt = context.WithCancel(context.Background())
	out.Reset()
	errb.Reset()
	go func() {
		done <- runWith(ctx, strings.NewReader("\n"), []string{"-redis", rt.RedisURL, "-prefix", rt.Keys.Prefix,
			"send", id, "and again", "--id", "r-goes-on", "--wait"}, &out, &errb)
	}()
	running("r-goes-on")
	interrupt()
	if code := <-done; code != exitFailed || !strings.Contains(errb.String(), "goes on") {
		t.Errorf("send --wait interrupted and answered no: exit %d, %s", code, errb.String())
	}
	if st := rt.RC.HGet(context.Background(), rt.Keys.Status(id), protocol.StatusFieldRequestID).Val(); st != "r-goes-on" {
		t.Errorf("the task not cancelled is no longer in flight (request_id %q)", st)
	}
	must(exitOK, "cancel", id, "r-goes-on")
}
