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
	// PresenceEvery is how often Do looks, while it waits, whether a
	// manager is still alive (default 2 s); negative: Do never looks, not
	// even before it sends, and waits out its Timeout.
	PresenceEvery time.Duration
}

// replyGrace is how long Do waits past a command's deadline: a manager
// that began it just in time answers then, and one that read it too late
// answers COMMAND_EXPIRED.
const replyGrace = 2 * time.Second

// Do sends cmd (its id, reply_to, time and deadline are filled in) and
// returns the reply. A reply that is not ok is returned with an error
// carrying its code.
//
// The command's deadline is now plus Timeout (one cmd already has is
// kept): a manager that reads it later does not carry it out, so a
// create Do gave up on never makes a worker. Before it sends, Do looks
// whether any manager is alive (their state hashes, PROTOCOL.md) and
// fails NO_MANAGER at once when none is; it looks again every
// PresenceEvery while it waits, and when no manager is left twice in a
// row it takes the command back off the stream and fails NO_MANAGER.
// No reply by the deadline is an error matching ErrNoReply (code
// COMMAND_EXPIRED).
//
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
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 6 * time.Minute
	}
	stream := c.Keys.Replies(name)
	cmd.ReplyTo, cmd.Timestamp = stream, time.Now().UTC()
	if cmd.Deadline.IsZero() {
		cmd.Deadline = cmd.Timestamp.Add(timeout)
	}
	doc, err := cmd.Encode()
	if err != nil {
		return protocol.Reply{}, Errorf(protocol.CodeInvalidCommand, "%v", err)
	}
	if _, err := protocol.DecodeCommand(doc); err != nil {
		return protocol.Reply{}, Errorf(protocol.CodeInvalidCommand, "%v", err)
	}
	p := presence{c.Redis, c.Keys}
	every := c.PresenceEvery
	if every == 0 {
		every = 2 * time.Second
	}
	if every > 0 {
		if err := p.check(ctx); err != nil {
			return protocol.Reply{}, err
		}
	}
	// Read replies after the stream's last entry before the command: "$"
	// would miss a reply written between the XADD and the first XREAD,
	// which is how fast a pause is answered.
	r := streams{c.Redis, c.Wait}
	last, err := r.lastID(ctx, stream)
	if err != nil {
		return protocol.Reply{}, redisError(err, "reply stream")
	}
	entry, err := r.add(ctx, c.Keys.Commands(), doc)
	if err != nil {
		return protocol.Reply{}, redisError(err, "send command")
	}
	until := cmd.Deadline.Add(replyGrace)
	nextLook, absent := time.Now().Add(every), 0
	for time.Now().Before(until) {
		block := min(time.Second, time.Until(until))
		res, err := r.read(ctx, []string{stream, last}, max(block, time.Millisecond), 0)
		if err != nil {
			return protocol.Reply{}, redisError(err, "read reply")
		}
		for _, m := range firstMessages(res) {
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
		if every < 0 || time.Now().Before(nextLook) {
			continue
		}
		nextLook = time.Now().Add(every)
		if alive, err := p.alive(ctx); err != nil || alive {
			absent = 0
			continue
		}
		if absent++; absent >= 2 {
			// No manager holds the command: taking it back keeps one that
			// starts later from carrying it out before its deadline.
			_ = c.Redis.XDel(ctx, c.Keys.Commands(), entry).Err()
			return protocol.Reply{}, &Error{Code: protocol.CodeNoManager, Err: fmt.Errorf("%w: command %s taken back after %s", errNoManager(c.Keys), cmd.ID, 2*every)}
		}
	}
	return protocol.Reply{}, &Error{Code: protocol.CodeCommandExpired, Err: noReply{cmd.ID, timeout}}
}

func firstMessages(res []redis.XStream) []redis.XMessage {
	if len(res) == 0 {
		return nil
	}
	return res[0].Messages
}

// ErrNoReply is what the error of a Do that got no reply by its
// command's deadline matches (errors.Is): the managers alive did not
// carry it out in time, and none will after (its code is
// COMMAND_EXPIRED).
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
	return fmt.Sprintf("no reply to %s within %s: a manager that reads it now does not carry it out", e.commandID, e.timeout)
}

func (noReply) Is(target error) bool { return target == ErrNoReply }
