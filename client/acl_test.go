package client

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/client/internal/redistest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/redis/go-redis/v9"
)

// documentedConsumerACL is the ACL SETUSER command PROTOCOL.md gives a
// consumer, as its words.
func documentedConsumerACL(t *testing.T) []any {
	t.Helper()
	doc, err := os.ReadFile("../protocol/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- consumer-acl -->")
	block, _, ok2 := strings.Cut(block, "<!-- /consumer-acl -->")
	if !ok || !ok2 {
		t.Fatal("PROTOCOL.md has no consumer-acl block")
	}
	for _, line := range strings.Split(block, "\n") {
		if strings.HasPrefix(line, "ACL SETUSER ") {
			var args []any
			for _, f := range strings.Fields(line) {
				args = append(args, f)
			}
			return args
		}
	}
	t.Fatal("the consumer-acl block has no ACL SETUSER line")
	return nil
}

// The consumer user PROTOCOL.md documents, made with its exact command,
// does what a consumer does: a command and its reply, a task sent with
// its run created (the one script), its output read, a worker's status
// and the lifecycle read. Writes anywhere else are refused.
func TestTheDocumentedConsumerUser(t *testing.T) {
	r := redistest.Start(t, "admin-password")
	admin := r.Client(t)
	ctx := context.Background()
	acl := documentedConsumerACL(t)
	if err := admin.Do(ctx, acl...).Err(); err != nil {
		t.Fatalf("%v: %v", acl, err)
	}
	bot := redis.NewClient(&redis.Options{Addr: r.Addr, Username: "bot", Password: "choose-a-password"})
	t.Cleanup(func() { bot.Close() })
	keys := protocol.Keys{}

	// The manager's part: it answers every command on the bot's reply
	// stream.
	go func() {
		last := "0-0"
		for ctx.Err() == nil {
			res, err := admin.XRead(ctx, &redis.XReadArgs{Streams: []string{keys.Commands(), last}, Block: time.Second}).Result()
			if err != nil {
				continue
			}
			for _, m := range res[0].Messages {
				last = m.ID
				data, _ := protocol.EntryData(m.Values)
				cmd, err := protocol.DecodeCommand(data)
				if err != nil {
					continue
				}
				doc, _ := protocol.Reply{CommandID: cmd.ID, Action: cmd.Action, OK: true, Timestamp: time.Now()}.Encode()
				admin.XAdd(ctx, &redis.XAddArgs{Stream: cmd.ReplyTo, Values: protocol.Values(doc)})
			}
		}
	}()
	// Its presence, which the consumer reads before it sends (and the
	// XDEL with which it takes a command back when the managers are gone).
	admin.HSet(ctx, keys.ManagerState("m1"), "id", "m1")
	admin.SAdd(ctx, keys.Managers(), "m1")
	if alive, err := (presence{bot, keys}).alive(ctx); err != nil || !alive {
		t.Fatalf("the managers' presence as the consumer user: %v %v", alive, err)
	}
	if err := bot.XDel(ctx, keys.Commands(), "1-1").Err(); err != nil {
		t.Fatalf("XDEL on the command stream as the consumer user: %v", err)
	}
	c := &Commands{Redis: bot, Keys: keys, Name: "bot", Timeout: 10 * time.Second}
	reply, err := c.Do(ctx, protocol.Command{Action: protocol.ActionList})
	if err != nil || !reply.OK {
		t.Fatalf("a command as the consumer user: %+v %v", reply, err)
	}

	admin.HSet(ctx, keys.Status("w1"), protocol.StatusFieldKind, string(protocol.KindLongLived), protocol.StatusFieldAgentType, string(protocol.AgentClaude))
	tasks := &Tasks{Redis: bot, Keys: keys}
	sent, err := tasks.Send(ctx, "w1", protocol.Task{RequestID: "r1", ProjectID: "p", Prompt: "x"})
	if err != nil {
		t.Fatalf("send as the consumer user: %v", err)
	}
	if st := bot.HGet(ctx, keys.Run("r1"), protocol.RunFieldStatus).Val(); st != string(protocol.RunRequested) {
		t.Fatalf("the run after the send: %q, want requested", st)
	}
	// The same script by EVALSHA, as the Python and TypeScript clients
	// send it.
	if err := createRunScript.Run(ctx, bot, []string{keys.Run("r2")}, protocol.RunFieldStatus, string(protocol.RunRequested)).Err(); err != nil {
		t.Fatalf("EVALSHA of the run script: %v", err)
	}
	out, err := protocol.Output{RequestID: "r1", WorkerID: "w1", AgentType: protocol.AgentClaude, Status: protocol.StatusComplete, Result: []byte(`{}`), Timestamp: time.Now()}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	admin.XAdd(ctx, &redis.XAddArgs{Stream: keys.Output("w1"), Values: protocol.Values(out)})
	awaitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if o, err := tasks.Await(awaitCtx, sent, nil); err != nil || o.Status != protocol.StatusComplete {
		t.Fatalf("await as the consumer user: %+v %v", o, err)
	}
	if err := bot.HGetAll(ctx, keys.Status("w1")).Err(); err != nil {
		t.Errorf("read a status: %v", err)
	}
	if err := bot.XRange(ctx, keys.Lifecycle(), "-", "+").Err(); err != nil {
		t.Errorf("read the lifecycle: %v", err)
	}

	for what, err := range map[string]error{
		"write a status hash":     bot.HSet(ctx, keys.Status("w1"), "status", "idle").Err(),
		"write a worker's output": bot.XAdd(ctx, &redis.XAddArgs{Stream: keys.Output("w1"), Values: map[string]any{"x": 1}}).Err(),
		"read another's replies":  bot.XRange(ctx, keys.Replies("other"), "-", "+").Err(),
		"a script on other keys":  bot.Eval(ctx, "return redis.call('HSET', KEYS[1], 'a', 1)", []string{keys.Status("w1")}).Err(),
		"delete a run":            bot.Del(ctx, keys.Run("r1")).Err(),
	} {
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s as the consumer user: %v, want NOPERM", what, err)
		}
	}
}
