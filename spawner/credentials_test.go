package spawner

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// A worker's Redis credentials reach only its own keys and the shared ones
// its kind needs, and die with the worker; the manager's never enter the
// container.
func TestWorkerRedisUserIsConfinedAndGoesWithTheWorker(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	a, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude})
	if err != nil {
		t.Fatal(err)
	}
	raw := f.workerRedisURL(t, a.WorkerID)
	u, err := url.Parse(raw)
	if err != nil || u.User.Username() != f.s.rdb.WorkerUser(a.WorkerID) {
		t.Fatalf("the worker's REDIS_URL %q names no user of its own", raw)
	}
	opt, _ := redis.ParseURL(raw)
	wc := redis.NewClient(opt)
	defer wc.Close()
	// Its own keys: yes.
	if err := wc.HSet(ctx, f.keys.Status(a.WorkerID), "probe", "1").Err(); err != nil {
		t.Fatalf("write its own status: %v", err)
	}
	if err := wc.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Lifecycle(), Values: map[string]any{"data": "{}"}}).Err(); err != nil {
		t.Fatalf("publish a lifecycle event: %v", err)
	}
	// Follow its input outside the group (the wrapper's follower of
	// cancels, messages and permission replies).
	if err := wc.XRead(ctx, &redis.XReadArgs{Streams: []string{f.keys.Input(a.WorkerID), "0-0"}, Block: -1}).Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("follow its own input: %v", err)
	}
	// Another worker's keys, the manager's, every key name, admin: no.
	for name, cmd := range map[string]func() error{
		"xadd into another worker's input": func() error {
			return wc.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Input(b.WorkerID), Values: map[string]any{"data": "{}"}}).Err()
		},
		"read another worker's status": func() error { return wc.HGetAll(ctx, f.keys.Status(b.WorkerID)).Err() },
		"send a command": func() error {
			return wc.XAdd(ctx, &redis.XAddArgs{Stream: f.keys.Commands(), Values: map[string]any{"data": "{}"}}).Err()
		},
		"read the lifecycle stream": func() error { return wc.XRange(ctx, f.keys.Lifecycle(), "-", "+").Err() },
		"follow another worker's input": func() error {
			return wc.XRead(ctx, &redis.XReadArgs{Streams: []string{f.keys.Input(b.WorkerID), "0-0"}, Block: -1}).Err()
		},
		"list every key":       func() error { return wc.Keys(ctx, "*").Err() },
		"scan":                 func() error { return wc.Scan(ctx, 0, "*", 10).Err() },
		"read the workers set": func() error { return wc.SMembers(ctx, f.keys.Workers()).Err() },
		"list clients":         func() error { return wc.ClientList(ctx).Err() },
		"acl":                  func() error { return wc.ACLList(ctx).Err() },
		"flushall":             func() error { return wc.FlushAll(ctx).Err() },
		"config":               func() error { return wc.ConfigGet(ctx, "*").Err() },
	} {
		if err := cmd(); err == nil || !strings.Contains(strings.ToUpper(err.Error()), "NOPERM") {
			t.Errorf("%s: %v, want NOPERM", name, err)
		}
	}
	if err := f.s.Delete(ctx, a.WorkerID); err != nil {
		t.Fatal(err)
	}
	if users, _ := f.s.rdb.WorkerUsers(ctx); len(users) != 1 || users[0] != b.WorkerID {
		t.Fatalf("worker users after deleting one: %v", users)
	}
	gone := redis.NewClient(opt)
	defer gone.Close()
	if err := gone.Ping(ctx).Err(); err == nil {
		t.Fatal("a deleted worker's credentials still open a connection")
	}
}

func TestRedactURL(t *testing.T) {
	if got := RedactURL("redis://agentvisor:w:1:s3cret@127.0.0.1:6379/0"); strings.Contains(got, "s3cret") {
		t.Fatalf("redacted %q", got)
	}
	if got := RedactURL("redis://:s3cret@127.0.0.1:bad/0"); strings.Contains(got, "s3cret") {
		t.Fatalf("redacted %q", got)
	}
}

// A real worker bound to its project (a long-lived worker with a
// project_id): its wrapper refuses another project's task INVALID_TASK
// and runs one that names none in its project, and its Redis user, as
// the manager made it, reaches its project's session but not another's.
func TestBoundWorkerServesItsProjectAlone(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	info, err := f.s.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "bound-a"})
	if err != nil {
		t.Fatal(err)
	}
	id := info.WorkerID
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "bound-other", ProjectID: "bound-b", Prompt: "not mine"})
	if o := f.waitOutput(t, f.keys.Output(id), "bound-other", 2*time.Minute); o.Status != protocol.StatusFailed || o.Error == nil ||
		o.Error.Code != protocol.CodeInvalidTask || !strings.Contains(o.Error.Message, "serves project bound-a only") {
		t.Fatalf("another project's task: %+v (error %+v)", o, o.Error)
	}
	f.send(t, f.keys.Input(id), protocol.Task{RequestID: "bound-none", Prompt: "mine"})
	if o := f.waitOutput(t, f.keys.Output(id), "bound-none", 2*time.Minute); o.Status != protocol.StatusComplete || o.ProjectID != "bound-a" {
		t.Fatalf("a task naming no project: %+v (error %+v)", o, o.Error)
	}
	raw := f.workerRedisURL(t, id)
	opt, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	wc := redis.NewClient(opt)
	defer wc.Close()
	if err := wc.HGetAll(ctx, f.keys.Session(protocol.AgentClaude, "bound-a")).Err(); err != nil {
		t.Errorf("its project's session: %v", err)
	}
	if err := wc.HGetAll(ctx, f.keys.Session(protocol.AgentClaude, "bound-b")).Err(); !redis.HasErrorPrefix(err, "NOPERM") {
		t.Errorf("another project's session: %v, want NOPERM", err)
	}
}

// workerRedisURL is the REDIS_URL the manager gave worker id's container.
func (f *fixture) workerRedisURL(t *testing.T, id string) string {
	t.Helper()
	c, err := f.dc.ContainerInspect(context.Background(), ContainerName(id))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range c.Config.Env {
		if v, ok := strings.CutPrefix(e, "REDIS_URL="); ok {
			return v
		}
	}
	return ""
}
