package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// TestEngineRestartedUnderWorkers: the Docker engine is not the source of
// truth for a worker's life. With live-restore (as scripts/setup.sh
// starts the default engine) a crash of dockerd leaves the containers
// running; the manager, reconnecting to the engine started again, keeps
// every worker, and each worker id answers.
func TestEngineRestartedUnderWorkers(t *testing.T) {
	const outage = 5 * time.Second
	c := NewCase(t, Options{
		Name: "Docker engine SIGKILLed and restarted under busy, idle and paused workers",
		Fault: "One host (a Docker engine of its own, started with live-restore as the default engine is, its manager and gateway); three " +
			"long-lived workers: one running a 6 s task, one idle, one paused. dockerd alone gets SIGKILL (containerd, the shims and the " +
			"containers keep running) and is started again 5 s later.",
		Recovered: "the busy worker's task answered complete, and each of the three worker ids answering a new task after the restart, " +
			"with no worker ended and no new container, within 60 s of the restart. Recovery time: the engine back to the last answer.",
		Detected: "none to detect: no worker ended.",
	})
	f := c.Fleet(1)
	h := f.Hosts[0]
	c.StartHostManager(h, map[string]string{"METRICS_ADDR": "off"})
	ws := c.CreateMany(3, protocol.KindLongLived, 90*time.Second)
	busy, idle, paused := ws[0], ws[1], ws[2]
	pause := c.Send(protocol.Command{Action: protocol.ActionPause, WorkerID: paused}, ReplyOK, "pause of the idle third worker")
	if _, ok := c.WaitAnswered([]string{pause}, 30*time.Second); !ok {
		t.Fatal("set-up: the pause was not answered within 30 s")
	}
	inFlight := c.Task(busy, "long fake:sleep-6000", Complete)
	if _, ok := c.WaitEvent(busy, protocol.EventTaskStarted, inFlight, 20*time.Second); !ok {
		t.Fatal("set-up: the busy worker's task did not start within 20 s")
	}
	killed, err := h.Engine.KillDaemon()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(killed.Add(outage)))
	if err := h.Engine.Start(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	var states []string
	for _, x := range hostContainers(t, h, c.Prefix) {
		_, st, _ := strings.Cut(x, ":")
		states = append(states, st)
	}
	c.Note("the workers' containers after the engine's restart: %s", strings.Join(states, ", "))
	ids := []string{inFlight}
	for _, w := range []string{busy, idle, paused} {
		ids = append(ids, c.Task(w, "after the engine's restart", Complete))
	}
	last, ok := c.WaitAnswered(ids, 60*time.Second)
	ended, made := 0, 0
	for _, ev := range c.Lifecycle(killed) {
		switch ev.Event {
		case protocol.EventDied, protocol.EventRemoved, protocol.EventHibernated:
			ended++
		case protocol.EventCreated:
			made++
		}
	}
	c.Unwanted(ended, "workers ended (died, removed or hibernated) by the engine's restart")
	c.Unwanted(made, "new containers made after the engine's restart")
	if ok {
		c.Recovered(last.Sub(up))
	} else {
		c.NotRecovered(60*time.Second, "tasks unanswered after the engine's restart")
	}
	c.Settle()
}
