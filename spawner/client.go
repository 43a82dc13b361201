package spawner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Client sends commands to the worker-managers and waits for their
// replies, on a reply stream of its own.
type Client struct {
	Redis   redis.Cmdable
	Keys    protocol.Keys
	Name    string        // names the reply stream (worker:replies:<name>); a random one when empty
	Timeout time.Duration // how long Do waits for a reply (default 6 min: a create may wait for a slot)
}

// Do sends cmd (its id, reply_to and time are filled in) and returns the
// reply. A reply that is not ok is returned with an error carrying its code.
func (c *Client) Do(ctx context.Context, cmd protocol.Command) (protocol.Reply, error) {
	if c.Name == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		c.Name = "client-" + hex.EncodeToString(b)
	}
	if cmd.ID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		cmd.ID = "cmd-" + hex.EncodeToString(b)
	}
	stream := c.Keys.Replies(c.Name)
	cmd.ReplyTo, cmd.Timestamp = stream, time.Now().UTC()
	doc, err := cmd.Encode()
	if err != nil {
		return protocol.Reply{}, err
	}
	if _, err := protocol.DecodeCommand(doc); err != nil {
		return protocol.Reply{}, err
	}
	// Read replies after the stream's last entry before the command: "$"
	// would miss a reply written between the XADD and the first XREAD,
	// which is how fast a pause is answered.
	last := "0-0"
	if msgs, err := c.Redis.XRevRangeN(ctx, stream, "+", "-", 1).Result(); err == nil && len(msgs) == 1 {
		last = msgs[0].ID
	}
	if err := c.Redis.XAdd(ctx, &redis.XAddArgs{Stream: c.Keys.Commands(), Values: protocol.Values(doc)}).Err(); err != nil {
		return protocol.Reply{}, fmt.Errorf("spawner: send command: %w", err)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 6 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		res, err := c.Redis.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return protocol.Reply{}, fmt.Errorf("spawner: read reply: %w", err)
		}
		for _, m := range res[0].Messages {
			last = m.ID
			data, _ := protocol.EntryData(m.Values)
			r, err := protocol.DecodeReply(data)
			if err != nil || r.CommandID != cmd.ID {
				continue
			}
			if !r.OK {
				return r, &Error{Code: r.Error.Code, Err: errors.New(r.Error.Message)}
			}
			return r, nil
		}
	}
	return protocol.Reply{}, &Error{Code: protocol.CodeUpstreamUnavailable, Err: fmt.Errorf("no reply to %s within %s", cmd.ID, timeout)}
}
