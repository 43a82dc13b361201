package spawner

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/agentvisor/agentvisor/protocol"
)

// Commands executes the commands of the commands stream, read through the
// managers group so that several managers do each command once. It reads
// its own pending entries first (a restart under the same MANAGER_ID),
// then new ones, and claims the entries a dead manager left pending
// (idle longer than a lease) whatever that manager's name. While a
// command runs, its entry is claimed again every third of a lease, so no
// live manager's command is taken from it.
type Commands struct {
	job
	s           *Spawner
	maxInFlight int

	mu       sync.Mutex
	inFlight map[string]bool // entry ids being executed; guarded by mu
	wg       sync.WaitGroup

	// The claims on the entries in flight are renewed until those
	// commands end, after the reading stopped: their own context.
	claims     context.Context
	stopClaims context.CancelFunc
}

func newCommands(s *Spawner, maxInFlight int) *Commands {
	if maxInFlight <= 0 {
		maxInFlight = 16
	}
	return &Commands{s: s, maxInFlight: maxInFlight, inFlight: map[string]bool{}}
}

// Start reads and executes commands until Stop.
func (c *Commands) Start(ctx context.Context) {
	c.claims, c.stopClaims = context.WithCancel(context.WithoutCancel(ctx))
	c.start(ctx, c.run)
}

// Stop stops reading, makes queued creates give up (SHUTTING_DOWN) and
// waits for the commands in flight, each answered and acknowledged, for
// at most the stop timeout: a command still running then (a cold image
// build) stays pending, and another manager claims it after a lease.
func (c *Commands) Stop() {
	c.job.Stop()
	c.s.BeginShutdown()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.s.cfg.StopTimeout):
		c.s.log.Warn("commands still in flight at the stop timeout: left to another manager")
	}
	if c.stopClaims != nil {
		c.stopClaims()
	}
}

func (c *Commands) run(ctx context.Context) {
	s := c.s
	sem := make(chan struct{}, c.maxInFlight)
	dispatch := func(msgs []redis.XMessage) bool {
		for _, msg := range msgs {
			c.mu.Lock()
			busy := c.inFlight[msg.ID]
			c.inFlight[msg.ID] = true
			c.mu.Unlock()
			if busy {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				c.forget(msg.ID)
				return false
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer func() { <-sem }()
				defer c.forget(msg.ID)
				c.execute(msg)
			}()
		}
		return true
	}
	go c.keepClaimed(c.claims)
	s.consume(ctx, s.keys.Commands(), dispatch)
}

func (c *Commands) forget(id string) {
	c.mu.Lock()
	delete(c.inFlight, id)
	c.mu.Unlock()
}

// keepClaimed claims the entries in flight again every third of a lease.
func (c *Commands) keepClaimed(ctx context.Context) {
	s := c.s
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			// Commands still running after Stop keep their entries until
			// they end; a manager killed now loses one lease.
			return
		}
		c.mu.Lock()
		ids := make([]string, 0, len(c.inFlight))
		for id := range c.inFlight {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		if err := s.rdb.Touch(ctx, s.keys.Commands(), protocol.ManagerGroup, s.cfg.ManagerID, ids); err != nil && ctx.Err() == nil {
			s.log.Warn("renew the claim on commands in flight", "err", err)
		}
	}
}

// execute runs one command, replies, and acknowledges it. It does not
// end with the manager's reading loop: a command in flight is finished
// (a queued create answers SHUTTING_DOWN at once).
func (c *Commands) execute(msg redis.XMessage) {
	s := c.s
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CreationTimeout+s.cfg.StopTimeout+5*time.Minute)
	defer cancel()
	data, err := protocol.EntryData(msg.Values)
	var cmd protocol.Command
	if err == nil {
		cmd, err = protocol.DecodeCommand(data)
	}
	reply := protocol.Reply{CommandID: cmd.ID, Action: cmd.Action, OK: true}
	replyTo := cmd.ReplyTo
	if err != nil {
		// Answer what can be answered of a malformed command.
		reply.CommandID = gjson.GetBytes(data, "command_id").String()
		if reply.CommandID == "" {
			reply.CommandID = "invalid-" + msg.ID
		}
		reply.Action = protocol.Action(gjson.GetBytes(data, "action").String())
		replyTo = gjson.GetBytes(data, "reply_to").String()
		reply.OK, reply.Error = false, protocol.NewError(protocol.CodeInvalidCommand, "%v", err)
		s.log.Warn("invalid command", "entry", msg.ID, "err", err)
	} else if replyTo != "" && !strings.HasPrefix(replyTo, s.keys.Replies("")) {
		// A reply is written only to a reply stream: never into a
		// worker's input or any other key a command names.
		s.log.Warn("command refused: reply_to is not a reply stream", "command_id", cmd.ID, "reply_to_prefix", s.keys.Replies(""))
		replyTo = ""
	} else {
		c.runCommand(ctx, cmd, &reply)
	}
	reply.Timestamp = s.now()
	if replyTo != "" {
		if doc, err := reply.Encode(); err == nil {
			if err := s.rdb.Reply(ctx, replyTo, doc); err != nil {
				s.log.Warn("reply not written", "command_id", reply.CommandID, "err", err)
				return // not acknowledged: executed again (idempotently) and answered
			}
		}
	}
	if err := s.rdb.Ack(ctx, s.keys.Commands(), protocol.ManagerGroup, msg.ID); err != nil {
		s.log.Warn("command not acknowledged", "command_id", reply.CommandID, "err", err)
	}
}

func (c *Commands) runCommand(ctx context.Context, cmd protocol.Command, reply *protocol.Reply) {
	s := c.s
	var err error
	var info protocol.WorkerInfo
	switch cmd.Action {
	case protocol.ActionCreate:
		info, err = s.CreateFor(ctx, cmd.ID, *cmd.Spec)
		reply.WorkerID = info.WorkerID
	case protocol.ActionDelete:
		err = s.Delete(ctx, cmd.WorkerID)
		reply.WorkerID = cmd.WorkerID
	case protocol.ActionStatus:
		info, err = s.Status(ctx, cmd.WorkerID)
	case protocol.ActionPause:
		if err = s.Pause(ctx, cmd.WorkerID); err == nil {
			info, err = s.Status(ctx, cmd.WorkerID)
		}
	case protocol.ActionUnpause:
		if err = s.Unpause(ctx, cmd.WorkerID); err == nil {
			info, err = s.Status(ctx, cmd.WorkerID)
		}
	case protocol.ActionList:
		reply.Workers, err = s.List(ctx)
	case protocol.ActionResetContext:
		err = s.ResetContext(ctx, cmd.AgentType, cmd.ProjectID)
	case protocol.ActionSetBudget:
		err = s.SetBudget(ctx, cmd.ProjectID, *cmd.Budget)
	}
	if err != nil {
		reply.OK, reply.Error, reply.Worker, reply.Workers = false, ProtocolError(err), nil, nil
		return
	}
	if info.WorkerID != "" {
		reply.Worker = &info
	}
}

// newRetry is the backoff of every loop that retries a failed read.
func newRetry() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, 5*time.Second
	return b
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
