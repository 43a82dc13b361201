package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
)

// What the demo reports of the manager besides the timeline: where its
// dashboard is, the usage per project, and its metrics.

// dashboard prints where the manager's dashboard and metrics are, as its
// state in Redis says.
func (d *demo) dashboard(ctx context.Context) error {
	err := poll(ctx, 100*time.Millisecond, 15*time.Second, func() (bool, error) {
		ms, err := spawner.ListManagers(ctx, d.rdb, d.keys)
		if err != nil {
			return false, err
		}
		for _, m := range ms {
			if m.ID == "demo" && m.MetricsAddr != "" {
				d.metricsAddr = m.MetricsAddr
				return true, nil
			}
		}
		return false, nil
	})
	if errors.Is(err, errTimedOut) {
		return fmt.Errorf("the manager wrote no state with its metrics address (manager log: %s)", d.logPath())
	}
	if err != nil {
		return err
	}
	d.tl.say("dashboard: http://%s/login?token=%s (live while the demo runs; /metrics with Authorization: Bearer and the same token)", d.metricsAddr, d.opsToken)
	return nil
}

// usage prints the cumulative usage per project, as the wrappers count it.
func (d *demo) usage(ctx context.Context) error {
	d.tl.section("usage per project (worker:usage:project:<id>; Droid's and Codex's cost is the wrapper's estimate from their usage)")
	return d.tl.block(func(w io.Writer) error {
		fmt.Fprintf(w, "  %-10s %5s %8s %8s %10s %10s %9s\n", "PROJECT", "TASKS", "INPUT", "OUTPUT", "CACHE_RD", "CACHE_WR", "COST_USD")
		for _, p := range []string{projectShop, projectDocs, projectCodex} {
			h, err := d.rdb.HGetAll(ctx, d.keys.UsageProject(p)).Result()
			if err != nil {
				return err
			}
			if h[protocol.UsageFieldTasks] == "" {
				return fmt.Errorf("no usage recorded for project %s", p)
			}
			cost, _ := strconv.ParseFloat(h[protocol.UsageFieldCostUSD], 64)
			fmt.Fprintf(w, "  %-10s %5s %8s %8s %10s %10s %9.4f\n", p, h[protocol.UsageFieldTasks], h[protocol.UsageFieldInput],
				h[protocol.UsageFieldOutput], h[protocol.UsageFieldCacheRead], h[protocol.UsageFieldCacheCreation], cost)
		}
		return nil
	})
}

// shownMetrics are the series of the manager's /metrics the demo prints.
var shownMetrics = []string{"agentvisor_workers{", "agentvisor_tasks_total", "agentvisor_creates_total", "agentvisor_tokens_total",
	"agentvisor_cost_usd_total", "agentvisor_wake_duration_seconds_count", "agentvisor_lifecycle_events_total{event=\"paused\"}"}

// metrics prints what the manager's /metrics says about this run.
func (d *demo) metrics(ctx context.Context) error {
	d.tl.section("metrics the manager saw (" + d.metricsAddr + "/metrics, agentvisor_*)")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metricsAddr+"/metrics", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+d.opsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return d.tl.block(func(w io.Writer) error {
		shown := 0
		for _, line := range strings.Split(string(body), "\n") {
			for _, name := range shownMetrics {
				if strings.HasPrefix(line, name) {
					fmt.Fprintf(w, "  %s\n", line)
					shown++
				}
			}
		}
		if shown == 0 {
			return fmt.Errorf("metrics: no agentvisor_ series in %d bytes", len(body))
		}
		return nil
	})
}
