package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// TestCommandsReachTheWorkersHost checks placement by label and
// ownership on two simulated hosts: every command and control request on
// a worker is read, while the worker's own host is frozen, by the other
// host's manager, which cannot touch the worker's container (it is on
// another engine) and must forward it; the worker's host executes it
// once it thaws, and replies once.
func TestCommandsReachTheWorkersHost(t *testing.T) {
	const hb = 2 * time.Second
	c := NewCase(t, Options{
		Name: "commands and control requests on a worker read by another host's manager (2 hosts)",
		Fault: "Two hosts (Docker engines of their own, one manager and one worker-gateway each, one Redis); host-2 alone has the label docker=true. " +
			"A create asks for that label; a create asks for a host that does not exist. Then pause, unpause, a wrapper's pause " +
			"request and delete of the worker are each sent while host-2's manager is frozen (SIGSTOP, under HOST_TTL), so host-1's " +
			"manager reads them.",
		Recovered: "the labelled create runs on host-2, the other is refused NO_HOST at once; each command is forwarded to host-2, " +
			"executed on host-2's engine (the container paused, running, paused, removed there) and answered once, by host-2; " +
			"host-1's engine never holds a container. Recovery time: the thaw to the delete's reply.",
		MaxWorkers: 4,
		Heartbeat:  hb,
	})
	f := c.Fleet(2)
	h1, h2 := f.Host("host-1"), f.Host("host-2")
	c.StartHostManager(h1, map[string]string{"METRICS_ADDR": "off"})
	m2 := c.StartHostManager(h2, map[string]string{"METRICS_ADDR": "off", "HOST_LABELS": "docker=true"})
	ctx := context.Background()

	spec := c.Spec(protocol.KindLongLived)
	spec.Placement = &protocol.Placement{Labels: map[string]string{"docker": "true"}}
	create := c.Send(protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, ReplyOK, "create asking for the label docker=true")
	a, err := c.WaitOne(create, 90*time.Second)
	if err != nil || !a.OK {
		t.Fatalf("the labelled create: %v %s", err, a.Desc)
	}
	w := a.Worker
	if h := c.RC.HGet(ctx, c.Keys.Status(w), protocol.StatusFieldHost).Val(); h != h2.ID {
		t.Fatalf("the create asking for docker=true runs on %q, want host-2", h)
	}
	nowhere := c.Spec(protocol.KindLongLived)
	nowhere.Placement = &protocol.Placement{Host: "host-9"}
	refused := c.Send(protocol.Command{Action: protocol.ActionCreate, Spec: &nowhere}, Refused, "create asking for a host that does not exist")
	if a, err := c.WaitOne(refused, 20*time.Second); err != nil || a.OK || !strings.Contains(a.Desc, string(protocol.CodeNoHost)) {
		t.Errorf("a create for host-9: %v %s, want NO_HOST", err, a.Desc)
	}
	if task := c.Task(w, "before the commands", Complete); true {
		if _, ok := c.WaitAnswered([]string{task}, 30*time.Second); !ok {
			t.Fatal("the worker on host-2 answered no task within 30 s")
		}
	}

	commands := func() int64 { return c.RC.XLen(ctx, c.Keys.HostCommands(h2.ID)).Val() }
	controls := func() int64 { return c.RC.XLen(ctx, c.Keys.HostControl(h2.ID)).Val() }
	// state returns the worker's container state on an engine ("" when none).
	state := func(h *Host) string {
		out, err := h.Engine.Docker("inspect", "-f", "{{.State.Status}}", "agentvisor-"+w)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	// whileFrozen freezes host-2's manager (for less than HOST_TTL: host-2
	// stays live), sends, and checks that host-1 forwarded it unanswered.
	// The case's lease is 3 s: reads block 1 s, and HOST_TTL is 4 s.
	var thawed time.Time
	whileFrozen := func(what string, send func() string, forwarded func() int64) string {
		t.Helper()
		before := forwarded()
		m2.Freeze()
		// A read host-2 sent before the freeze still takes what comes
		// until its block ends (a third of a lease at most).
		time.Sleep(c.Lease/3 + 200*time.Millisecond)
		id := send()
		if !c.waitFor(1500*time.Millisecond, func() bool { return forwarded() > before }) {
			t.Errorf("%s: host-1 did not forward it to host-2's stream", what)
		}
		if as := c.answers()[id]; id != "" && len(as) > 0 {
			t.Errorf("%s answered while host-2's manager was frozen: %s", what, as[0].Desc)
		}
		m2.Thaw()
		thawed = time.Now()
		return id
	}
	for _, step := range []struct {
		action protocol.Action
		want   string
	}{{protocol.ActionPause, "paused"}, {protocol.ActionUnpause, "running"}} {
		id := whileFrozen(string(step.action), func() string {
			return c.Send(protocol.Command{Action: step.action, WorkerID: w}, ReplyOK, string(step.action)+" read by host-1")
		}, commands)
		if a, err := c.WaitOne(id, 20*time.Second); err != nil || !a.OK {
			t.Fatalf("%s: %v %s", step.action, err, a.Desc)
		}
		if got := state(h2); got != step.want {
			t.Errorf("after %s the container on host-2 is %q, want %s", step.action, got, step.want)
		}
	}
	// A wrapper's pause request read by host-1: forwarded to host-2's
	// control stream, and the worker is paused there.
	whileFrozen("a pause request", func() string {
		doc, err := protocol.Control{Action: protocol.ControlPause, WorkerID: w, Reason: "test", Timestamp: time.Now().UTC()}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		c.RC.XAdd(ctx, &redis.XAddArgs{Stream: c.Keys.Control(), Values: protocol.Values(doc)})
		return ""
	}, controls)
	if !c.waitFor(10*time.Second, func() bool { return state(h2) == "paused" }) {
		t.Errorf("the pause request read by host-1 did not pause the worker on host-2: %q (control stream of host-2: %d entries)",
			state(h2), c.RC.XLen(ctx, c.Keys.HostControl(h2.ID)).Val())
	}
	del := whileFrozen("delete", func() string {
		return c.Send(protocol.Command{Action: protocol.ActionDelete, WorkerID: w}, ReplyOK, "delete read by host-1")
	}, commands)
	if a, err := c.WaitOne(del, StopTimeout+20*time.Second); err != nil || !a.OK {
		t.Fatalf("delete: %v %s", err, a.Desc)
	} else {
		c.Recovered(a.At.Sub(thawed))
	}
	if got := state(h2); got != "" {
		t.Errorf("after the delete the container on host-2 is %q", got)
	}
	if n := len(hostContainers(t, h1, c.Prefix)); n != 0 {
		t.Errorf("host-1's engine holds %d containers of the case", n)
	}
	c.Settle()
}
