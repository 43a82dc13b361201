package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// The demo's set-up: its Redis clients, the worker-manager's environment
// (the stub model or the real API, the warm pool) and what an earlier run
// left.

// connect opens Redis and the clients over it.
func (d *demo) connect(ctx context.Context) error {
	var err error
	if d.rdb, err = redisconn.Open(d.redisURL); err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	wait, err := redisconn.Policy(d.redisURL)
	if err == nil {
		err = d.rdb.Ping(ctx).Err()
		if err != nil {
			err = fmt.Errorf("redis at %s does not answer: %w", protocol.RedactRedisURL(d.redisURL), err)
		}
	}
	if err == nil {
		d.keys, err = protocol.NewKeys(os.Getenv("WORKER_KEY_PREFIX"))
	}
	if err != nil {
		d.rdb.Close()
		return err
	}
	d.cli = &client.Commands{Redis: d.rdb, Keys: d.keys, Name: "demo", Timeout: 5 * time.Minute, Wait: wait}
	d.tasks = &client.Tasks{Redis: d.rdb, Keys: d.keys, Wait: wait}
	return nil
}

// managerID is the demo's manager's MANAGER_ID.
const managerID = "demo"

// managerEnv is the worker-manager's environment: the real Anthropic API
// when ANTHROPIC_API_KEY is set (and DEMO_STUB is not true), else the stub
// model, which the returned function stops.
func (d *demo) managerEnv() ([]string, func(), error) {
	d.opsToken = ops.NewToken()
	env := []string{"REDIS_URL=" + d.managerURL, "WORKER_KEY_PREFIX=" + d.keys.Prefix, "MANAGER_ID=" + managerID, "HEARTBEAT_INTERVAL=2s", d.poolsEnv(), workerEnv,
		"WORKER_STOP_TIMEOUT=12s", "WORKER_NETWORK_MODE=sealed", "GATEWAY_DIR=" + d.gatewayDir(), "METRICS_ADDR=" + envOr("DEMO_METRICS_ADDR", "127.0.0.1:0"),
		"OPS_TOKEN=" + d.opsToken}
	if key := os.Getenv("ANTHROPIC_API_KEY"); key != "" && os.Getenv("DEMO_STUB") != "true" {
		d.tl.say("ANTHROPIC_API_KEY is set: the agents use the real Anthropic API")
		return append(env, "DROID_BASE_URL=https://api.anthropic.com"), func() {}, nil
	}
	var err error
	if d.stub, err = stubmodel.Start(stubmodel.Script{}); err != nil {
		return nil, nil, err
	}
	d.tl.say("stub model server (Anthropic Messages API stand-in) listening on %s", d.stub.URL)
	env = append(env, "ANTHROPIC_BASE_URL="+d.stub.URL, "DROID_BASE_URL="+d.stub.URL, "ANTHROPIC_API_KEY=sk-demo-stub-key",
		"OPENAI_BASE_URL="+d.stub.URL, "OPENAI_API_KEY=sk-demo-stub-key", stubPrices)
	return env, func() { _ = d.stub.Close() }, nil
}

// forgetEarlierRuns removes what an earlier run of the demo left in its
// projects: volumes, usage, sessions, stored context and session files,
// and the tasks still waiting on the inputs of its workers (a manager's
// stop hibernates long-lived workers, whose identity outlives it: the
// next task would wake one). It returns those workers, which are deleted
// once this run's manager is up (deleteEarlierWorkers).
func (d *demo) forgetEarlierRuns(ctx context.Context) (earlier []string, err error) {
	if _, err := cleanUp(ctx, d.keys); err != nil {
		return nil, err
	}
	for _, p := range []string{projectShop, projectDocs, projectCodex, projectBranch} {
		for _, a := range []protocol.AgentType{protocol.AgentClaude, protocol.AgentDroid, protocol.AgentCodex} {
			d.rdb.Del(ctx, d.keys.Session(a, p), d.keys.SessionFiles(a, p))
		}
		d.rdb.Del(ctx, d.keys.UsageProject(p), d.keys.ProjectContext(p))
	}
	f := &client.Fleet{Redis: d.rdb, Keys: d.keys}
	ids, err := f.Workers(ctx)
	if err != nil {
		return nil, err
	}
	sts, err := f.Statuses(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, st := range sts {
		switch st.Hash[protocol.StatusFieldProjectID] {
		case projectShop, projectDocs, projectCodex:
			earlier = append(earlier, st.ID)
			kind := protocol.Kind(st.Hash[protocol.StatusFieldKind])
			d.rdb.Del(ctx, d.keys.InputsFor(kind, st.ID)...)
		}
	}
	return earlier, nil
}

// deleteEarlierWorkers deletes the workers an earlier run of the demo
// left (forgetEarlierRuns), through this run's manager.
func (d *demo) deleteEarlierWorkers(ctx context.Context, earlier []string) error {
	if len(earlier) == 0 {
		return nil
	}
	d.tl.say("deleting %d workers an earlier run of the demo left (hibernated by its manager's stop, or lost with it)", len(earlier))
	for _, id := range earlier {
		if _, err := d.cli.Do(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: id}); err != nil && !client.IsNotFound(err) {
			return fmt.Errorf("delete the earlier run's worker %s: %w", id, err)
		}
	}
	return nil
}

// poolsEnv is the manager's POOLS: one warm Claude worker of the demo's
// spec, made ahead with its Claude process up, then paused.
func (d *demo) poolsEnv() string {
	b, _ := json.Marshal([]map[string]any{{"name": "claude-shop", "spec": d.claudeSpec(), "min_warm": 1, "max_total": 2}})
	return "POOLS=" + string(b)
}
