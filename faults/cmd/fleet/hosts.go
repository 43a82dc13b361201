package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/faults"
	"github.com/agentvisor/agentvisor/protocol"
)

// What the run reads of the hosts: where a worker runs, which hosts are
// live, their free slots and the containers on their engines.

func (r *run) hostOf(ctx context.Context, worker string) string {
	return r.rc.HGet(ctx, r.keys.Status(worker), protocol.StatusFieldHost).Val()
}

// waitHosts waits until n hosts are live in the registry.
func (r *run) waitHosts(ctx context.Context, n int, bound time.Duration) error {
	if waitFor(ctx, bound, func() bool {
		live, _ := r.rc.ZCount(ctx, r.keys.Hosts(), fmt.Sprint(time.Now().UnixMilli()), "+inf").Result()
		return int(live) >= n
	}) {
		return nil
	}
	return fmt.Errorf("fewer than %d hosts live in %s after %s", n, r.keys.Hosts(), bound)
}

// freeSlots says each host's free slots: its max_workers less the
// workers placed on it.
func (r *run) freeSlots(ctx context.Context) string {
	placed, _ := r.rc.HGetAll(ctx, r.keys.Placement()).Result()
	used := map[string]int{}
	for _, h := range placed {
		used[h]++
	}
	var parts []string
	for _, h := range r.fleet.Hosts {
		parts = append(parts, fmt.Sprintf("%s %d", h.ID, r.perHost-used[h.ID]))
	}
	return strings.Join(parts, ", ")
}

// engineContainers lists the fleet's containers on a host's engine.
func (r *run) engineContainers(h *faults.Host) []string {
	out, err := h.Engine.Docker("ps", "-a", "--filter", "label="+protocol.LabelKeyPrefix+"="+r.keys.Prefix,
		"--format", `{{.Label "`+protocol.LabelWorkerID+`"}} {{.State}}`)
	if err != nil {
		return nil
	}
	var cs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			cs = append(cs, r.tl.name(f[0])+" "+f[1])
		}
	}
	return cs
}
