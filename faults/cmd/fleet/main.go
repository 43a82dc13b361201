// Command fleet shows a fleet at work on one machine, as one timeline
// (`make fleet`): three simulated hosts, each a Docker engine of its own
// (dockerd, containerd, data root) with a worker-manager (HOST_ID host-1,
// host-2, host-3) and a worker-gateway (the workers are sealed: their
// containers have no network, their wrappers reach Redis through the
// host's gateway), on one Redis it starts itself; creates spread by free
// slots; a load of tasks for the wrapper's fake agent; host-2 killed whole
// in the middle of it (manager, gateway, engine, containerd, shims and
// containers SIGKILLed at one instant, as a machine that loses power); every task
// answered exactly once; host-2 restarted, reconciled (its old containers
// removed) and back in placement (the next create lands on it). It ends
// with a summary line and exits 1 unless nothing was lost, duplicated or
// left behind.
//
// It runs from the repository's top directory, as root, after `make
// setup`; it builds what it needs (faults.Build).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/faults"
	"github.com/agentvisor/agentvisor/protocol"
)

func main() {
	hosts := flag.Int("hosts", 3, "simulated hosts (Docker engines)")
	perHost := flag.Int("max-workers", 4, "MAX_CONCURRENT_WORKERS of each host")
	workers := flag.Int("workers", 6, "workers to create")
	tasks := flag.Int("tasks", 30, "tasks to send, spread over the workers")
	taskMS := flag.Int("task-ms", 1500, "how long the fake agent works on a task")
	heartbeat := flag.Duration("heartbeat", 2*time.Second, "HEARTBEAT_INTERVAL of the managers (HOST_TTL is two of them)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r := &run{tl: newTimeline(os.Stdout, time.Now()), hosts: *hosts, perHost: *perHost, workers: *workers, tasks: *tasks,
		taskMS: *taskMS, hb: *heartbeat}
	ok, err := r.run(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nfleet FAILED: %v\n", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// run is one run of the fleet. Its stages, in order, are files:
// setup.go, spread.go, kill.go, restart.go, count.go. requests.go sends
// the commands and tasks and reads their answers; events.go follows the
// lifecycle stream; hosts.go reads the hosts' state; timeline.go prints.
type run struct {
	hosts, perHost, workers, tasks, taskMS int
	hb                                     time.Duration

	tl     *timeline
	rc     *redis.Client
	keys   protocol.Keys
	req    *requests
	events *lifecycle
	fleet  *faults.Fleet
	logDir string
	env    map[string]string
}

func (r *run) run(ctx context.Context) (bool, error) {
	closeAll, err := r.setUp(ctx)
	defer closeAll()
	if err != nil {
		return false, err
	}
	defer r.events.follow(ctx)()
	ids, perHost, err := r.spread(ctx)
	if err != nil {
		return false, err
	}
	victim := r.fleet.Host("host-2")
	taskIDs, declared, err := r.loadAndKill(ctx, ids, perHost[victim.ID], victim)
	if err != nil {
		return false, err
	}
	back, err := r.restart(ctx, victim)
	if err != nil {
		return false, err
	}
	return r.count(ctx, taskIDs, declared, back, victim)
}

func since(t time.Time) string { return round(time.Since(t)) }

func round(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.0f s", d.Seconds())
	}
	if d >= time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
