package client

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

// Commands sends commands to the worker-managers and waits for their
// replies, on a reply stream of its own.
type Commands struct {
	Redis   redis.Cmdable
	Keys    protocol.Keys
	Name    string        // names the reply stream (worker:replies:<name>); a random one when empty
	Timeout time.Duration // how long Do waits for a reply (default 6 min: a create may wait for a slot)
	// Wait is WAIT's policy for the command's XADD (zero: no WAIT), as
	// Tasks.Wait: a failover does not lose a command once it is sent.
	Wait protocol.WaitPolicy
}

// Do sends cmd (its id, reply_to and time are filled in) and returns the
// reply. A reply that is not ok is returned with an error carrying its code.
// Do is safe for concurrent use; a Commands without a Name answers each call
// on a reply stream of its own (it expires after the manager's REPLY_TTL).
func (c *Commands) Do(ctx context.Context, cmd protocol.Command) (protocol.Reply, error) {
	name := c.Name
	if name == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		name = "client-" + hex.EncodeToString(b)
	}
	if cmd.ID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		cmd.ID = "cmd-" + hex.EncodeToString(b)
	}
	stream := c.Keys.Replies(name)
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
	r := streams{c.Redis, c.Wait}
	last, err := r.lastID(ctx, stream)
	if err != nil {
		return protocol.Reply{}, redisError(err, "reply stream")
	}
	if err := r.send(ctx, c.Keys.Commands(), doc); err != nil {
		return protocol.Reply{}, redisError(err, "send command")
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 6 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		res, err := r.read(ctx, []string{stream, last}, time.Second, 0)
		if err != nil {
			return protocol.Reply{}, redisError(err, "read reply")
		}
		if len(res) == 0 {
			continue
		}
		for _, m := range res[0].Messages {
			last = m.ID
			data, _ := protocol.EntryData(m.Values)
			reply, err := protocol.DecodeReply(data)
			if err != nil || reply.CommandID != cmd.ID {
				continue
			}
			if !reply.OK {
				return reply, &Error{Code: reply.Error.Code, Err: errors.New(reply.Error.Message)}
			}
			return reply, nil
		}
	}
	return protocol.Reply{}, &Error{Code: protocol.CodeUpstreamUnavailable, Err: noReply{cmd.ID, timeout}}
}

// ErrNoReply is what the error of a Do that got no reply within its
// Timeout matches (errors.Is): no manager read the command in time, or
// none runs. Its code is UPSTREAM_UNAVAILABLE, as of a Redis that does
// not answer; ErrNoReply tells the two apart.
var ErrNoReply = errors.New("client: no reply")

// IsNoReply reports whether err is a Do that got no reply in time.
func IsNoReply(err error) bool { return errors.Is(err, ErrNoReply) }

// noReply is the error of a Do that got no reply: it names the command
// and the time waited, and matches ErrNoReply.
type noReply struct {
	commandID string
	timeout   time.Duration
}

func (e noReply) Error() string {
	return fmt.Sprintf("no reply to %s within %s", e.commandID, e.timeout)
}

func (noReply) Is(target error) bool { return target == ErrNoReply }
