package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client/internal/redistest"
	"github.com/agentvisor/agentvisor/protocol"
)

// answerOnSend is a go-redis hook playing the fastest possible manager: it
// writes the reply to a command before the client's XADD of that command
// has even returned.
type answerOnSend struct{ keys protocol.Keys }

func (answerOnSend) DialHook(next redis.DialHook) redis.DialHook { return next }
func (answerOnSend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h answerOnSend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err != nil || len(args) < 2 || args[0] != "xadd" || args[1] != h.keys.Commands() {
			return err
		}
		for i := 2; i+1 < len(args); i++ {
			if args[i] != protocol.EntryField {
				continue
			}
			data, _ := args[i+1].(string)
			c, derr := protocol.DecodeCommand([]byte(data))
			if derr != nil {
				return err
			}
			reply := protocol.Reply{CommandID: c.ID, Action: c.Action, OK: true, Timestamp: time.Now().UTC()}
			doc, _ := reply.Encode()
			// Straight through next: the hook must not see its own write.
			return next(ctx, redis.NewStringCmd(ctx, "xadd", c.ReplyTo, "*", protocol.EntryField, string(doc)))
		}
		return err
	}
}

// A reply written before the client starts reading is still its reply: a
// new client's reply stream does not exist when it sends its first command.
func TestCommandsSeeAReplyFasterThanTheirRead(t *testing.T) {
	rc := redistest.NewClient(t)
	defer rc.Close()
	keys := protocol.Keys{Prefix: "ct"}
	fakeManager(t, rc, keys, "m1")
	rc.AddHook(answerOnSend{keys: keys})
	for i := 0; i < 3; i++ { // the first on a new stream, then on one with replies
		c := &Commands{Redis: rc, Keys: keys, Name: "fast", Timeout: 3 * time.Second}
		if i == 2 {
			c.Name = "" // a random, new stream again
		}
		if _, err := c.Do(context.Background(), protocol.Command{Action: protocol.ActionList}); err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
}

// fakeManager writes what a running worker-manager keeps about itself
// (its id in the managers set, its state hash under a TTL): a sender of
// commands then counts a manager alive. The returned func removes it, as
// a manager that stops does.
func fakeManager(t *testing.T, rc *redis.Client, keys protocol.Keys, id string) func() {
	t.Helper()
	ctx := context.Background()
	if err := rc.HSet(ctx, keys.ManagerState(id), "id", id).Err(); err != nil {
		t.Fatal(err)
	}
	rc.Expire(ctx, keys.ManagerState(id), protocol.ManagerStateTTLSeconds*time.Second)
	rc.SAdd(ctx, keys.Managers(), id)
	return func() { rc.Del(ctx, keys.ManagerState(id)) }
}

// A command that no live manager answers ends in an error a caller
// branches on without reading its text: COMMAND_EXPIRED matching
// ErrNoReply, and the command carries the deadline after which no manager
// carries it out.
func TestCommandsNoReplyIsTyped(t *testing.T) {
	rc := redistest.NewClient(t)
	defer rc.Close()
	keys := protocol.Keys{Prefix: "silent"}
	fakeManager(t, rc, keys, "m1") // alive, and never reads
	c := &Commands{Redis: rc, Keys: keys, Timeout: 1500 * time.Millisecond}
	before := time.Now()
	_, err := c.Do(context.Background(), protocol.Command{Action: protocol.ActionList})
	if !IsNoReply(err) || !HasCode(err, protocol.CodeCommandExpired) {
		t.Fatalf("Do with a silent manager: %v; want COMMAND_EXPIRED matching ErrNoReply", err)
	}
	if !strings.HasPrefix(err.Error(), "COMMAND_EXPIRED: no reply to cmd-") {
		t.Fatalf("Do with a silent manager: %q", err)
	}
	msgs := rc.XRange(context.Background(), keys.Commands(), "-", "+").Val()
	if len(msgs) != 1 {
		t.Fatalf("%d commands on the stream, want 1", len(msgs))
	}
	data, _ := protocol.EntryData(msgs[0].Values)
	cmd, err := protocol.DecodeCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmd.Deadline.Sub(before); d < 1500*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("the command's deadline is %v after the call, want its 1.5 s timeout", d)
	}
	if IsNoReply(redisError(context.DeadlineExceeded, "read reply")) {
		t.Fatal("a failed Redis call matches ErrNoReply")
	}
}

// With no manager alive a command fails NO_MANAGER at once and is not
// sent: a manager that starts later finds nothing to carry out.
func TestCommandsWithNoManagerFailFast(t *testing.T) {
	rc := redistest.NewClient(t)
	defer rc.Close()
	ctx := context.Background()
	keys := protocol.Keys{Prefix: "nomgr"}
	// A manager that died: its id is in the set, its state hash expired.
	rc.SAdd(ctx, keys.Managers(), "dead")
	c := &Commands{Redis: rc, Keys: keys, Timeout: time.Minute}
	start := time.Now()
	_, err := c.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &protocol.WorkerSpec{AgentType: protocol.AgentClaude}})
	took := time.Since(start)
	if !HasCode(err, protocol.CodeNoManager) || !IsNoManager(err) {
		t.Fatalf("create with no manager: %v; want NO_MANAGER", err)
	}
	if took > 3*time.Second {
		t.Errorf("NO_MANAGER took %v, want under 3 s", took)
	}
	if n := rc.XLen(ctx, keys.Commands()).Val(); n != 0 {
		t.Errorf("%d commands sent with no manager alive", n)
	}
	t.Logf("NO_MANAGER after %v: %v", took, err)
}

// A manager that goes away while a sender waits: the sender learns it
// within two looks and takes its command back off the stream.
func TestCommandsTakeBackWhenTheManagersLeave(t *testing.T) {
	rc := redistest.NewClient(t)
	defer rc.Close()
	ctx := context.Background()
	keys := protocol.Keys{Prefix: "leaving"}
	leave := fakeManager(t, rc, keys, "m1")
	c := &Commands{Redis: rc, Keys: keys, Timeout: time.Minute, PresenceEvery: 300 * time.Millisecond}
	time.AfterFunc(200*time.Millisecond, leave)
	start := time.Now()
	_, err := c.Do(ctx, protocol.Command{Action: protocol.ActionDelete, WorkerID: "w1"})
	if !IsNoManager(err) {
		t.Fatalf("delete after the managers left: %v; want NO_MANAGER", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("NO_MANAGER took %v", took)
	}
	if n := rc.XLen(ctx, keys.Commands()).Val(); n != 0 {
		t.Errorf("the command is still on the stream (%d entries)", n)
	}
}

// Redis refusing the credentials is its own code and not retryable; a
// refused connection says so.
func TestCommandsRedisErrorsByCause(t *testing.T) {
	r := redistest.Start(t, "right")
	tests := []struct {
		name    string
		opt     *redis.Options
		code    protocol.Code
		message string
	}{
		{"wrong password", &redis.Options{Addr: r.Addr, Password: "wrong"}, protocol.CodeRedisAuth, "WRONGPASS"},
		{"no password", &redis.Options{Addr: r.Addr}, protocol.CodeRedisAuth, "NOAUTH"},
		{"refused connection", &redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}, protocol.CodeUpstreamUnavailable, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := redis.NewClient(tt.opt)
			defer rc.Close()
			c := &Commands{Redis: rc, Keys: protocol.Keys{}, Timeout: time.Second}
			_, err := c.Do(context.Background(), protocol.Command{Action: protocol.ActionList})
			if !HasCode(err, tt.code) || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("got %v, want %s saying %q", err, tt.code, tt.message)
			}
			if tt.code.Retryable() != (tt.code != protocol.CodeRedisAuth) {
				t.Errorf("%s retryable: %v", tt.code, tt.code.Retryable())
			}
		})
	}
}

// A command the protocol refuses is INVALID_COMMAND, naming the field,
// before anything is sent.
func TestCommandsRefuseABadSpec(t *testing.T) {
	rc := redistest.NewClient(t)
	keys := protocol.Keys{Prefix: "bad"}
	fakeManager(t, rc, keys, "m1")
	c := &Commands{Redis: rc, Keys: keys, Timeout: time.Second}
	_, err := c.Do(context.Background(), protocol.Command{Action: protocol.ActionCreate, Spec: &protocol.WorkerSpec{AgentType: "claud"}})
	if !HasCode(err, protocol.CodeInvalidCommand) || !strings.Contains(err.Error(), "spec.agent_type") {
		t.Fatalf("a create of agent %q: %v, want INVALID_COMMAND naming spec.agent_type", "claud", err)
	}
	if n := rc.XLen(context.Background(), keys.Commands()).Val(); n != 0 {
		t.Errorf("%d commands sent", n)
	}
}
