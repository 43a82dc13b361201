package rdb

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
)

// loginAs makes worker id's user of scope in r's Redis and returns a
// client logged in as it, as the worker's wrapper would be.
func loginAs(t *testing.T, r *testRDB, ctx context.Context, id string, scope UserScope) *redis.Client {
	t.Helper()
	password := "pw-" + id
	if err := r.SetWorkerUser(ctx, id, password, scope); err != nil {
		t.Fatal(err)
	}
	opt := r.c.(*redis.Client).Options()
	c := redis.NewClient(&redis.Options{Addr: opt.Addr, Username: r.WorkerUser(id), Password: password})
	t.Cleanup(func() { c.Close() })
	return c
}

// A worker bound to a project, holding its own Redis credentials as a
// compromised wrapper would, tries every key family of another worker and
// another project, reading and writing: each attempt is refused NOPERM
// (with commands the worker may run, so that the key is what is refused),
// while its own keys and its project's still serve it. The same holds for
// a worker whose project id has glob characters, and after the users are
// made again from their records (a Redis restart).
func TestWorkerUserReachesOnlyItsOwnAndItsProjectsKeys(t *testing.T) {
	r, ctx := newRDB(t)
	k := r.Keys
	a := UserScope{Kind: protocol.KindLongLived, Agent: protocol.AgentClaude, Project: "pa"}
	loginAs(t, r, ctx, "wb", UserScope{Kind: protocol.KindLongLived, Agent: protocol.AgentClaude, Project: "pb"})
	// The other worker's and the other project's keys exist, as they do
	// in a deployment.
	r.c.HSet(ctx, k.Status("wb"), "state", "idle")
	r.c.HSet(ctx, k.Session(protocol.AgentClaude, "pb"), "session_id", "s-b")
	r.c.HSet(ctx, k.Session(protocol.AgentDroid, "pa"), "session_id", "s-d")
	r.c.Set(ctx, k.SessionFiles(protocol.AgentClaude, "pb"), "gz", 0)
	r.c.Set(ctx, k.ProjectContext("pb"), "the summary of pb", 0)
	r.c.HSet(ctx, k.UsageProject("pb"), protocol.UsageFieldCostUSD, "3")
	r.c.HSet(ctx, k.ProjectBudget("pb"), protocol.BudgetFieldLimitUSD, "10")

	refused := []struct {
		name string
		do   func(c *redis.Client) error
	}{
		{"stream: another worker's input, write", func(c *redis.Client) error {
			return c.XAdd(ctx, &redis.XAddArgs{Stream: k.Input("wb"), Values: []any{"data", "{}"}}).Err()
		}},
		{"stream: another worker's input, read", func(c *redis.Client) error { return c.XRange(ctx, k.Input("wb"), "-", "+").Err() }},
		{"stream: another worker's output, write", func(c *redis.Client) error {
			return c.XAdd(ctx, &redis.XAddArgs{Stream: k.Output("wb"), Values: []any{"data", "{}"}}).Err()
		}},
		{"stream: another worker's output, read", func(c *redis.Client) error { return c.XRange(ctx, k.Output("wb"), "-", "+").Err() }},
		{"stream: the developer queue, read", func(c *redis.Client) error { return c.XRange(ctx, k.DeveloperInput(), "-", "+").Err() }},
		{"stream: the lifecycle stream, read", func(c *redis.Client) error { return c.XRange(ctx, k.Lifecycle(), "-", "+").Err() }},
		{"status: another worker's, read", func(c *redis.Client) error { return c.HGetAll(ctx, k.Status("wb")).Err() }},
		{"status: another worker's, write", func(c *redis.Client) error { return c.HSet(ctx, k.Status("wb"), "state", "dead").Err() }},
		{"status: another worker's history, write", func(c *redis.Client) error { return c.LPush(ctx, k.StatusHistory("wb"), "x").Err() }},
		{"heartbeat: another worker's, write", func(c *redis.Client) error { return c.Set(ctx, k.Heartbeat("wb"), "1", 0).Err() }},
		{"session: another project's, read", func(c *redis.Client) error { return c.HGetAll(ctx, k.Session(protocol.AgentClaude, "pb")).Err() }},
		{"session: another project's, write", func(c *redis.Client) error {
			return c.HSet(ctx, k.Session(protocol.AgentClaude, "pb"), "session_id", "poisoned").Err()
		}},
		{"session: its project's of another agent, read", func(c *redis.Client) error {
			return c.HGetAll(ctx, k.Session(protocol.AgentDroid, "pa")).Err()
		}},
		{"session files: another project's, read", func(c *redis.Client) error { return c.Get(ctx, k.SessionFiles(protocol.AgentClaude, "pb")).Err() }},
		{"session files: another project's, write", func(c *redis.Client) error {
			return c.Set(ctx, k.SessionFiles(protocol.AgentClaude, "pb"), "poisoned", 0).Err()
		}},
		{"context: another project's, read", func(c *redis.Client) error { return c.Get(ctx, k.ProjectContext("pb")).Err() }},
		{"context: another project's, write", func(c *redis.Client) error { return c.Set(ctx, k.ProjectContext("pb"), "poisoned", 0).Err() }},
		{"usage: another project's, read", func(c *redis.Client) error { return c.HGetAll(ctx, k.UsageProject("pb")).Err() }},
		{"usage: another project's, write", func(c *redis.Client) error {
			return c.HIncrByFloat(ctx, k.UsageProject("pb"), protocol.UsageFieldCostUSD, -3).Err()
		}},
		{"usage: another worker's, write", func(c *redis.Client) error {
			return c.HIncrBy(ctx, k.UsageWorker("wb"), protocol.UsageFieldInput, 1).Err()
		}},
		{"budget: another project's, read", func(c *redis.Client) error { return c.HGetAll(ctx, k.ProjectBudget("pb")).Err() }},
		{"budget: its own project's, write", func(c *redis.Client) error {
			return c.HSet(ctx, k.ProjectBudget("pa"), protocol.BudgetFieldLimitUSD, "1000000").Err()
		}},
		{"lock: the leader lease, read", func(c *redis.Client) error { return c.Get(ctx, ctlplane.LeaseKey(k, "leader")).Err() }},
		{"lock: the leader lease, write", func(c *redis.Client) error { return c.Set(ctx, ctlplane.LeaseKey(k, "leader"), "me", 0).Err() }},
		{"commands: write", func(c *redis.Client) error {
			return c.XAdd(ctx, &redis.XAddArgs{Stream: k.Commands(), Values: []any{"data", "{}"}}).Err()
		}},
		{"commands: read", func(c *redis.Client) error { return c.XRange(ctx, k.Commands(), "-", "+").Err() }},
		{"replies: read", func(c *redis.Client) error { return c.XRange(ctx, k.Replies("ctl"), "-", "+").Err() }},
		{"replies: write", func(c *redis.Client) error {
			return c.XAdd(ctx, &redis.XAddArgs{Stream: k.Replies("ctl"), Values: []any{"data", "{}"}}).Err()
		}},
		{"pools: a warm set, read", func(c *redis.Client) error { return c.Exists(ctx, ctlplane.PoolWarmSetKey(k, "p")).Err() }},
		{"pools: a warm set, write", func(c *redis.Client) error { return c.Del(ctx, ctlplane.PoolWarmSetKey(k, "p")).Err() }},
		{"worker users' record, read", func(c *redis.Client) error { return c.HGetAll(ctx, ctlplane.WorkerUsersKey(k)).Err() }},
	}
	own := []struct {
		name string
		do   func(c *redis.Client) error
	}{
		{"its status", func(c *redis.Client) error { return c.HSet(ctx, k.Status("wa"), "state", "idle").Err() }},
		{"its heartbeat", func(c *redis.Client) error { return c.Set(ctx, k.Heartbeat("wa"), "1", 0).Err() }},
		{"its output", func(c *redis.Client) error {
			return c.XAdd(ctx, &redis.XAddArgs{Stream: k.Output("wa"), Values: []any{"data", "{}"}}).Err()
		}},
		{"its input", func(c *redis.Client) error { return c.XRange(ctx, k.Input("wa"), "-", "+").Err() }},
		{"its project's session", func(c *redis.Client) error {
			return c.HSet(ctx, k.Session(protocol.AgentClaude, "pa"), "session_id", "s-a").Err()
		}},
		{"its project's session files", func(c *redis.Client) error {
			return c.Set(ctx, k.SessionFiles(protocol.AgentClaude, "pa"), "gz", 0).Err()
		}},
		{"its project's context", func(c *redis.Client) error { return c.Set(ctx, k.ProjectContext("pa"), "summary", 0).Err() }},
		{"its project's usage", func(c *redis.Client) error {
			return c.HIncrByFloat(ctx, k.UsageProject("pa"), protocol.UsageFieldCostUSD, 0.5).Err()
		}},
		{"its project's budget", func(c *redis.Client) error {
			return c.HMGet(ctx, k.ProjectBudget("pa"), protocol.BudgetFieldLimitUSD).Err()
		}},
		{"its usage", func(c *redis.Client) error {
			return c.HIncrBy(ctx, k.UsageWorker("wa"), protocol.UsageFieldInput, 1).Err()
		}},
		{"the lifecycle stream, write", func(c *redis.Client) error {
			return c.XAdd(ctx, &redis.XAddArgs{Stream: k.Lifecycle(), Values: []any{"data", "{}"}}).Err()
		}},
	}
	check := func(t *testing.T, c *redis.Client) {
		for _, tt := range refused {
			t.Run("refused "+tt.name, func(t *testing.T) {
				if err := tt.do(c); !redis.HasErrorPrefix(err, "NOPERM") {
					t.Fatalf("got %v, want NOPERM", err)
				}
			})
		}
		for _, tt := range own {
			t.Run("allowed "+tt.name, func(t *testing.T) {
				if err := tt.do(c); err != nil {
					t.Fatalf("refused: %v", err)
				}
			})
		}
	}
	wa := loginAs(t, r, ctx, "wa", a)
	t.Run("as made", func(t *testing.T) { check(t, wa) })

	t.Run("after a Redis restart", func(t *testing.T) {
		r.c.ACLDelUser(ctx, r.WorkerUser("wa"))
		if n, err := r.RestoreWorkerUsers(ctx); err != nil || n != 1 {
			t.Fatalf("restored %d (%v), want 1", n, err)
		}
		wa.Conn().Close()
		check(t, wa)
	})

	t.Run("a project id of glob characters", func(t *testing.T) {
		r.c.HSet(ctx, k.Session(protocol.AgentClaude, "p?"), "session_id", "s-q")
		c := loginAs(t, r, ctx, "wg", UserScope{Kind: protocol.KindLongLived, Agent: protocol.AgentClaude, Project: "p*"})
		for _, p := range []string{"pa", "pb", "p?"} {
			if err := c.HGetAll(ctx, k.Session(protocol.AgentClaude, p)).Err(); !redis.HasErrorPrefix(err, "NOPERM") {
				t.Errorf("project p* read project %s's session: %v", p, err)
			}
		}
		if err := c.HSet(ctx, k.Session(protocol.AgentClaude, "p*"), "session_id", "s").Err(); err != nil {
			t.Errorf("project p* refused its own session: %v", err)
		}
	})
}
