package worker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

// An adopt document on the input makes the wrapper stop as itself and
// name the worker it is to become, when it can log in as that worker's
// Redis user with its own password; a forged one (a user it cannot log in
// as) is acknowledged and changes nothing: the worker goes on serving.
func TestAdoptNeedsTheWorkersLogin(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	ctx := context.Background()
	// The worker logs in as a user of its own, as under per-worker ACLs
	// (agentvisor:<prefix>:<id>).
	own := "agentvisor:t:" + e.cfg.WorkerID
	for user, password := range map[string]string{own: "same-password", "agentvisor:t:woken-1": "same-password",
		"agentvisor:t:woken-x": "another-password"} {
		if err := e.rc.ACLSetUser(ctx, user, "reset", "on", ">"+password, "~*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	u, err := protocol.ParseRedisURL(e.cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.RedisURL = u.WithUser(own, "same-password").String()
	stop, w := e.start()
	input := e.keys.Input(e.cfg.WorkerID)
	adopt := func(a protocol.Adopt) {
		doc, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rc.XAdd(ctx, &redis.XAddArgs{Stream: input, Values: protocol.Values(doc)}).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Forgeries: a user it cannot log in as; its own user, for another
	// worker; another worker's user for a third.
	adopt(protocol.Adopt{WorkerID: "woken-x", RedisUser: "agentvisor:t:woken-x"})
	adopt(protocol.Adopt{WorkerID: "woken-y", RedisUser: own})
	adopt(protocol.Adopt{WorkerID: "woken-z", RedisUser: "agentvisor:t:woken-1"})
	e.send(input, protocol.Task{RequestID: "after-forgery", Prompt: "hello"})
	if o := e.waitOutputs(e.keys.Output(e.cfg.WorkerID), 1, 60*time.Second)[0]; o.Status != protocol.StatusComplete {
		t.Fatalf("the task after forged adopts: %+v", o)
	}
	if w.Adopted() != nil {
		t.Fatalf("a forged adopt was taken: %+v", w.Adopted())
	}

	adopt(protocol.Adopt{WorkerID: "woken-1", RedisUser: "agentvisor:t:woken-1", CredentialHosts: []string{"git.example.com", "10.0.0.7"}})
	testkit.Eventually(t, "the genuine adopt taken", 30*time.Second, func() bool { return w.Adopted() != nil })
	// Run ends by itself: the worker stops as itself (its heartbeat goes).
	testkit.Eventually(t, "the warm worker stopped", 30*time.Second, func() bool {
		return e.rc.Exists(ctx, e.keys.Heartbeat(e.cfg.WorkerID)).Val() == 0
	})
	stop()
	a := w.Adopted()
	if a.WorkerID != "woken-1" {
		t.Fatalf("adopted %+v", a)
	}
	got, err := protocol.ParseRedisURL(a.RedisURL)
	if err != nil || got.Username != "agentvisor:t:woken-1" || got.Password != "same-password" {
		t.Fatalf("the adopted URL's user %q (password kept: %v), %v", got.Username, got.Password == "same-password", err)
	}
	env := AdoptedEnviron([]string{"PATH=/bin", "WORKER_ID=warm-1", "REDIS_URL=" + e.cfg.RedisURL, "MODEL_SOCKET_TOKEN=tok", "AGENT_PREWARM=true",
		"CREDENTIAL_HOSTS=warm-only.example.com"}, a)
	if !slices.Contains(env, "WORKER_ID=woken-1") || !slices.Contains(env, "MODEL_SOCKET_TOKEN=tok") || slices.Contains(env, "WORKER_ID=warm-1") ||
		slices.Contains(env, "AGENT_PREWARM=true") || !slices.Contains(env, "CREDENTIAL_HOSTS=git.example.com,10.0.0.7") ||
		slices.Contains(env, "CREDENTIAL_HOSTS=warm-only.example.com") {
		t.Fatalf("the adopted environment: %q", env)
	}
	pending, err := e.rc.XPending(ctx, input, protocol.WorkerGroup).Result()
	if err == nil && pending.Count != 0 {
		t.Errorf("%d entries left pending: the adopt documents are acknowledged", pending.Count)
	}
}
