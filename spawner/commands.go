package spawner

import (
	"context"
	"errors"
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
	commandsParams

	mu       sync.Mutex
	inFlight map[entryRef]bool // entries being executed; guarded by mu
	wg       sync.WaitGroup

	// The claims on the entries in flight are renewed until those
	// commands end, after the reading stopped: their own context.
	claims     context.Context
	stopClaims context.CancelFunc
}

// commandsParams is what Commands is built from.
type commandsParams struct {
	*env
	consumer
	workers commandTarget
	// resume answers a create naming an existing worker (hibernation.resume).
	resume      func(ctx context.Context, id string, spec protocol.WorkerSpec) (protocol.WorkerInfo, bool, error)
	maxInFlight int           // commands executed at once (16 when 0)
	stopTimeout time.Duration // how long Stop waits for the commands in flight
	// timeout bounds one command (a create waits for a slot, builds an
	// image and starts a container).
	timeout time.Duration
	// deadlines drops the commands whose senders stopped waiting.
	deadlines deadlines
}

// commandTarget is what commands act on: the Spawner's operations.
type commandTarget interface {
	createCommand(ctx context.Context, commandID string, spec protocol.WorkerSpec, forward func(ctx context.Context, host string) error) (protocol.WorkerInfo, error)
	Delete(ctx context.Context, id string) error
	Status(ctx context.Context, id string) (protocol.WorkerInfo, error)
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
	Hibernate(ctx context.Context, id string) error
	List(ctx context.Context) ([]protocol.WorkerInfo, error)
	ResetContext(ctx context.Context, agent protocol.AgentType, project string) error
	SetBudget(ctx context.Context, project string, b protocol.Budget) error
	SetNetwork(ctx context.Context, id string, network protocol.Network) (protocol.WorkerInfo, error)
	BeginShutdown()
}

func newCommands(p commandsParams) *Commands {
	if p.maxInFlight <= 0 {
		p.maxInFlight = 16
	}
	return &Commands{commandsParams: p, inFlight: map[entryRef]bool{}}
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
	c.workers.BeginShutdown()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.stopTimeout):
		c.log.Warn("commands still in flight at the stop timeout: left to another manager")
	}
	if c.stopClaims != nil {
		c.stopClaims()
	}
}

// entryRef names an entry of one of the streams a manager reads.
type entryRef struct{ stream, id string }

// run reads the fleet's shared command stream and this host's own (the
// commands other managers forwarded here) and executes what they bring.
func (c *Commands) run(ctx context.Context) {
	sem := make(chan struct{}, c.maxInFlight)
	dispatch := func(stream string) func(msgs []redis.XMessage) bool {
		return func(msgs []redis.XMessage) bool {
			for _, msg := range msgs {
				ref := entryRef{stream, msg.ID}
				c.mu.Lock()
				busy := c.inFlight[ref]
				c.inFlight[ref] = true
				c.mu.Unlock()
				if busy {
					continue
				}
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					c.forget(ref)
					return false
				}
				c.wg.Add(1)
				go func() {
					defer c.wg.Done()
					defer func() { <-sem }()
					defer c.forget(ref)
					c.execute(stream, msg)
				}()
			}
			return true
		}
	}
	go c.keepClaimed(c.claims)
	own := c.keys.HostCommands(c.Host())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.consume(ctx, own, dispatch(own))
	}()
	c.consume(ctx, c.keys.Commands(), dispatch(c.keys.Commands()))
	wg.Wait()
}

func (c *Commands) forget(ref entryRef) {
	c.mu.Lock()
	delete(c.inFlight, ref)
	c.mu.Unlock()
}

// keepClaimed claims the entries in flight again every third of a lease.
func (c *Commands) keepClaimed(ctx context.Context) {
	t := time.NewTicker(c.leaseTTL / 3)
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
		ids := map[string][]string{}
		for ref := range c.inFlight {
			ids[ref.stream] = append(ids[ref.stream], ref.id)
		}
		c.mu.Unlock()
		for stream, ids := range ids {
			if err := c.rdb.Touch(ctx, stream, protocol.ManagerGroup, c.managerID, ids); err != nil && ctx.Err() == nil {
				c.log.Warn("renew the claim on commands in flight", "err", err)
			}
		}
	}
}

// execute runs one command, replies, and acknowledges it. It does not
// end with the manager's reading loop: a command in flight is finished
// (a queued create answers SHUTTING_DOWN at once).
func (c *Commands) execute(stream string, msg redis.XMessage) {
	s := c.env
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
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
	} else if !c.deadlines.expired(cmd, &reply, "before it ran") {
		forward := func(ctx context.Context, host string) error {
			if err := s.fleet.Forward(ctx, stream, s.keys.HostCommands(host), msg.ID, data); err != nil {
				return redisError(err, "forward command %s to host %s", cmd.ID, host)
			}
			return nil
		}
		rctx, rcancel := c.deadlines.bound(ctx, cmd)
		forwarded := c.runCommand(rctx, cmd, &reply, forward)
		rcancel()
		if forwarded {
			return // on the stream of the host that serves it, which replies
		}
		if made := reply.WorkerID; cmd.Action == protocol.ActionCreate && c.deadlines.expired(cmd, &reply, "while it ran") {
			c.deadlines.undo(cmd, made)
		}
	}
	reply.Timestamp = s.now()
	if replyTo != "" {
		if doc, err := reply.Encode(); err == nil {
			// Answered and acknowledged together, or neither: executed
			// again (idempotently) and answered.
			if err := s.rdb.Reply(ctx, replyTo, doc, stream, protocol.ManagerGroup, msg.ID); err != nil {
				s.log.Warn("reply not written", "command_id", reply.CommandID, "err", err)
			}
			return
		}
	}
	if err := s.rdb.Ack(ctx, stream, protocol.ManagerGroup, msg.ID); err != nil {
		s.log.Warn("command not acknowledged", "command_id", reply.CommandID, "err", err)
	}
}

// runCommand executes one command and fills its reply; it reports true
// when it forwarded the command to the host that serves it instead.
func (c *Commands) runCommand(ctx context.Context, cmd protocol.Command, reply *protocol.Reply, forward func(ctx context.Context, host string) error) bool {
	s := c.workers
	var err error
	var info protocol.WorkerInfo
	switch cmd.Action {
	case protocol.ActionDelete, protocol.ActionPause, protocol.ActionUnpause, protocol.ActionSetNetwork, protocol.ActionHibernate:
		if done, ferr := c.route(ctx, cmd, forward); done || ferr != nil {
			if ferr != nil {
				reply.OK, reply.Error = false, ProtocolError(ferr)
			}
			return done
		}
	}
	switch cmd.Action {
	case protocol.ActionCreate:
		if cmd.WorkerID != "" {
			var resumed bool
			if info, resumed, err = c.resume(ctx, cmd.WorkerID, *cmd.Spec); resumed || err != nil {
				reply.WorkerID = cmd.WorkerID
				break
			}
			reply.Warnings = append(reply.Warnings, "worker "+cmd.WorkerID+" is gone or of another agent or project: a new worker was made")
		}
		info, err = s.createCommand(ctx, cmd.ID, *cmd.Spec, forward)
		if errors.Is(err, errForwarded) {
			return true
		}
		reply.WorkerID, reply.Warnings = info.WorkerID, append(reply.Warnings, protocol.SpecWarnings(*cmd.Spec)...)
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
	case protocol.ActionHibernate:
		if err = s.Hibernate(ctx, cmd.WorkerID); err == nil {
			info, err = s.Status(ctx, cmd.WorkerID)
		}
	case protocol.ActionList:
		reply.Workers, err = s.List(ctx)
	case protocol.ActionResetContext:
		err = s.ResetContext(ctx, cmd.AgentType, cmd.ProjectID)
	case protocol.ActionSetBudget:
		err = s.SetBudget(ctx, cmd.ProjectID, *cmd.Budget)
	case protocol.ActionSetNetwork:
		info, err = s.SetNetwork(ctx, cmd.WorkerID, *cmd.Network)
	}
	if err != nil {
		reply.OK, reply.Error, reply.Worker, reply.Workers = false, ProtocolError(err), nil, nil
		return false
	}
	if info.WorkerID != "" {
		reply.Worker = &info
	}
	return false
}

// route sends an action on a worker of another live host to that host
// (done: true). A worker of a host that is not live is deleted from here
// (its container is out of reach; a returning host removes it), and
// cannot be paused or woken (NO_HOST). A worker of this host: done false.
func (c *Commands) route(ctx context.Context, cmd protocol.Command, forward func(ctx context.Context, host string) error) (bool, error) {
	rt, err := c.fleet.Route(ctx, cmd.WorkerID)
	switch {
	case err != nil:
		return false, redisError(err, "route %s", cmd.WorkerID)
	case rt.Here:
		return false, nil
	case rt.Live:
		if err := forward(ctx, rt.Host); err != nil {
			return false, err
		}
		return true, nil
	case cmd.Action == protocol.ActionDelete:
		return false, nil
	}
	return false, errorf(protocol.CodeNoHost, "worker %s runs on host %s, which is not live", cmd.WorkerID, rt.Host)
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
