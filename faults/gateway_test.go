package faults

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
)

// The host's worker-gateway crashes while its sealed workers are busy,
// and a supervisor starts it again on its directory: the workers'
// connections to Redis are cut at once, their socket files go stale, and
// the new gateway makes the sockets anew at the same paths.
func TestGatewayKilledUnderLoad(t *testing.T) {
	const (
		n       = 6
		work    = 6 * time.Second // the tasks in flight at the kill
		restart = 2 * time.Second // the supervisor's restart delay
	)
	c := NewCase(t, Options{
		Name: "worker-gateway SIGKILLed under load, restarted on its directory",
		Fault: fmt.Sprintf("Six sealed workers (no network: Redis through the gateway's sockets; 2 s heartbeats) run tasks of %.0f s, "+
			"each with a task queued behind; the worker-gateway gets SIGKILL (every worker's Redis connection cut, its sockets stale), "+
			"a task per worker is sent while it is down, and it is started again on the same directory %.0f s later (a supervisor's restart); "+
			"then a task per worker more.", work.Seconds(), restart.Seconds()),
		Recovered: "every task answered complete, once, by the worker it was sent to, within its run time + 15 s of the restart; no worker declared dead " +
			"(no `dead` event), none replaced or re-created (same containers), the new gateway serves all six. " +
			"Recovery time: the restart to the last answer of the tasks sent before it.",
		Detected:  "the restart to the moment every worker's wrapper has connected through the new gateway (its /stats).",
		Heartbeat: 2 * time.Second,
	})
	c.StartManager("m1", nil)
	workers := c.CreateMany(n, protocol.KindLongLived, 60*time.Second)
	containers := map[string]string{}
	for _, w := range workers {
		containers[w] = c.ContainerOf(w)
		// Sealed: no network, or a spare network namespace's (a holder's
		// on the none network: loopback only).
		mode := strings.TrimSpace(c.Docker("inspect", "-f", "{{.HostConfig.NetworkMode}}", containers[w]))
		if _, ok := strings.CutPrefix(mode, "container:"); ok {
			// The holder may have gone since (the namespace lives on
			// with the worker): the worker's own namespace is read.
			pid := strings.TrimSpace(c.Docker("inspect", "-f", "{{.State.Pid}}", containers[w]))
			out, err := exec.Command("nsenter", "-t", pid, "-n", "ip", "-o", "link").CombinedOutput()
			if err != nil {
				t.Fatalf("set-up: the links of worker %s's network namespace: %v\n%s", short(w), err, out)
			}
			mode = "none"
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if f := strings.Fields(l); len(f) < 2 || f[1] != "lo:" {
					mode = "a namespace with " + l
				}
			}
		}
		if mode != "none" {
			t.Fatalf("set-up: worker %s's container has network %q, want none (sealed)", short(w), mode)
		}
	}
	var inFlight, queued []string
	for _, w := range workers {
		inFlight = append(inFlight, c.Task(w, fmt.Sprintf("long fake:sleep-%d", work.Milliseconds()), Complete))
		queued = append(queued, c.Task(w, "queued behind", Complete))
	}
	for i, req := range inFlight {
		if _, ok := c.WaitEvent(workers[i], protocol.EventTaskStarted, req, 20*time.Second); !ok {
			t.Fatalf("set-up: %s did not start within 20 s", req)
		}
	}
	creates := c.WatchCreations()
	time.Sleep(time.Second)
	killed := time.Now()
	c.Gateway().Kill()
	var during []string
	for _, w := range workers {
		during = append(during, c.Task(w, "sent while the gateway is down", Complete))
	}
	time.Sleep(time.Until(killed.Add(restart)))
	g := c.RestartGateway()
	up := time.Now()
	t.Logf("gateway down for %s, back as pid %d", roundDur(up.Sub(killed)), g.Pid())
	if at, ok := c.waitReconnected(g, workers, 3*c.Opt.Heartbeat+10*time.Second); ok {
		c.Detection(at.Sub(up))
	}

	bound := work + 15*time.Second
	before := slices.Concat(inFlight, queued, during)
	last, ok := c.WaitAnswered(before, time.Until(up.Add(bound)))
	var after []string
	for _, w := range workers {
		after = append(after, c.Task(w, "after the restart", Complete))
	}
	_, afterOK := c.WaitAnswered(after, 15*time.Second)
	c.Settle()
	c.Unwanted(len(creates.Since(killed)), "workers created after the gateway's crash (a replacement)")
	dead, declared := c.Event(killed, "", protocol.EventDead, "", 0)
	served, err := g.Workers()
	switch {
	case declared:
		c.NotRecovered(bound, fmt.Sprintf("worker %s declared dead after the gateway's crash", short(dead.WorkerID)))
	case !ok:
		c.NotRecovered(bound, "tasks sent before the restart unanswered")
	case !afterOK:
		c.NotRecovered(bound, "tasks sent after the restart unanswered within 15 s")
	case err != nil || len(served) != n:
		c.NotRecovered(bound, fmt.Sprintf("the restarted gateway serves %d workers, not %d (%v)", len(served), n, err))
	case !c.sameContainers(containers):
		c.NotRecovered(bound, "a worker's container changed")
	default:
		c.Recovered(last.Sub(up))
	}
}

// waitReconnected waits until every worker has a connection accepted by
// gateway g (since its start), and returns when they all had.
func (c *Case) waitReconnected(g *Gateway, workers []string, bound time.Duration) (time.Time, bool) {
	client := gateway.NewClient(g.Dir)
	ok := c.waitFor(bound, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := client.Stats(ctx)
		if err != nil {
			return false
		}
		for _, w := range workers {
			if st[w].Accepted == 0 {
				return false
			}
		}
		return true
	})
	if !ok {
		c.Note("not every worker connected through the restarted gateway within %s", roundDur(bound))
	}
	return time.Now(), ok
}

// sameContainers reports whether every worker still runs in the
// container it had (by id), noting the first that does not.
func (c *Case) sameContainers(had map[string]string) bool {
	for w, id := range had {
		if now := c.ContainerOf(w); now != id {
			c.Note("worker %s: container %s, was %s", short(w), short(now), short(id))
			return false
		}
	}
	return true
}
