package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
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
	rc := testkit.NewRedisClient(t)
	defer rc.Close()
	keys := protocol.Keys{Prefix: "ct"}
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

// A command nobody answers ends in an error a caller branches on without
// reading its text: UPSTREAM_UNAVAILABLE that IsNoReply tells apart from a
// Redis that does not answer.
func TestCommandsNoReplyIsTyped(t *testing.T) {
	rc := testkit.NewRedisClient(t)
	defer rc.Close()
	c := &Commands{Redis: rc, Keys: protocol.Keys{Prefix: "nobody"}, Timeout: 1500 * time.Millisecond}
	_, err := c.Do(context.Background(), protocol.Command{Action: protocol.ActionList})
	if !IsNoReply(err) || !HasCode(err, protocol.CodeUpstreamUnavailable) {
		t.Fatalf("Do with no manager: %v; want UPSTREAM_UNAVAILABLE matching ErrNoReply", err)
	}
	if !strings.HasPrefix(err.Error(), "UPSTREAM_UNAVAILABLE: no reply to cmd-") {
		t.Fatalf("Do with no manager: %q", err)
	}
	if IsNoReply(redisError(context.DeadlineExceeded, "read reply")) {
		t.Fatal("a failed Redis call matches ErrNoReply")
	}
}
