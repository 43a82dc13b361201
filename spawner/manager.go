package spawner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"
	"golang.org/x/sync/errgroup"

	"github.com/agentvisor/agentvisor/protocol"
)

// Manager is the worker-manager service over a Spawner: it executes the
// commands of worker:commands (through the consumer group "managers", so
// that several managers sharing one Redis do each command once), pauses
// workers that ask for it, wakes paused workers that have input, and
// forwards crashes.
type Manager struct {
	S *Spawner
	// MaxInFlight bounds the commands executed at once (a create may wait
	// for a slot for minutes).
	MaxInFlight int
}

// Run serves until ctx ends. Shutdown order: stop reading commands, let
// the commands in flight finish, then return; the caller decides whether
// to Shutdown the workers.
func (m *Manager) Run(ctx context.Context) error {
	s := m.S
	for _, stream := range []string{s.keys.Commands(), s.keys.Control()} {
		if err := s.rdb.XGroupCreateMkStream(ctx, stream, protocol.ManagerGroup, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("spawner: create group on %s: %w", stream, err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { m.commands(gctx); return nil })
	g.Go(func() error { m.controls(gctx); return nil })
	g.Go(func() error { s.watchEvents(gctx); return nil })
	g.Go(func() error { s.wakeOnInput(gctx); return nil })
	g.Go(func() error { s.monitor(gctx); return nil })
	g.Go(func() error { s.reconcileLoop(gctx); return nil })
	return g.Wait()
}

// pendingCursor walks this manager's own pending entries once, in order:
// entries are handled asynchronously, so the same pending entries must not
// be read again while they are in flight.
type pendingCursor struct {
	done bool
	from string // read pending entries after this id
}

// readGroup reads one batch of a stream through the managers group: this
// manager's own pending entries first, then new ones.
func (m *Manager) readGroup(ctx context.Context, stream string, cur *pendingCursor) ([]redis.XMessage, error) {
	s := m.S
	id, block := ">", 2*time.Second
	if !cur.done {
		id, block = cur.from, -1
		if id == "" {
			id = "0"
		}
	}
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: protocol.ManagerGroup, Consumer: s.cfg.ManagerID,
		Streams: []string{stream, id}, Count: 16, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	msgs := res[0].Messages
	if !cur.done {
		if len(msgs) == 0 {
			cur.done = true
		} else {
			cur.from = msgs[len(msgs)-1].ID
		}
	}
	return msgs, nil
}

func (m *Manager) commands(ctx context.Context) {
	s := m.S
	limit := m.MaxInFlight
	if limit <= 0 {
		limit = 16
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	defer wg.Wait()
	var pending pendingCursor
	for ctx.Err() == nil {
		msgs, err := m.readGroup(ctx, s.keys.Commands(), &pending)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("read commands", "err", err)
				time.Sleep(500 * time.Millisecond)
			}
			continue
		}
		for _, msg := range msgs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				m.execute(context.WithoutCancel(ctx), msg)
			}()
		}
	}
}

// execute runs one command, replies, and acknowledges it.
func (m *Manager) execute(ctx context.Context, msg redis.XMessage) {
	s := m.S
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
	} else {
		m.run(ctx, cmd, &reply)
	}
	reply.Timestamp = s.now()
	if replyTo != "" {
		if doc, err := reply.Encode(); err == nil {
			s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: replyTo, Values: protocol.Values(doc)})
		}
	}
	s.rdb.XAck(ctx, s.keys.Commands(), protocol.ManagerGroup, msg.ID)
}

func (m *Manager) run(ctx context.Context, cmd protocol.Command, reply *protocol.Reply) {
	s := m.S
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
	}
	if err != nil {
		reply.OK, reply.Error, reply.Worker, reply.Workers = false, ProtocolError(err), nil, nil
		return
	}
	if info.WorkerID != "" {
		reply.Worker = &info
	}
}

// ResetContext forgets a project's agent session and its stored context:
// the project's next task starts fresh.
func (s *Spawner) ResetContext(ctx context.Context, agent protocol.AgentType, project string) error {
	if err := s.rdb.Del(ctx, s.keys.Session(agent, project), s.keys.ProjectContext(project)).Err(); err != nil {
		return &Error{protocol.CodeUpstreamUnavailable, err}
	}
	return nil
}

// controls serves the wrappers' pause requests: the wrapper never pauses
// itself. A worker whose input already holds a task is not paused.
func (m *Manager) controls(ctx context.Context) {
	s := m.S
	var pending pendingCursor
	for ctx.Err() == nil {
		msgs, err := m.readGroup(ctx, s.keys.Control(), &pending)
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(500 * time.Millisecond)
			}
			continue
		}
		for _, msg := range msgs {
			data, _ := protocol.EntryData(msg.Values)
			c, err := protocol.DecodeControl(data)
			if err == nil {
				if s.hasInput(ctx, c.WorkerID) {
					s.log.Info("pause request skipped: input waiting", "worker_id", c.WorkerID)
				} else if err := s.Pause(ctx, c.WorkerID); err != nil && !IsNotFound(err) {
					s.log.Warn("pause on request", "worker_id", c.WorkerID, "err", err)
				}
			}
			s.rdb.XAck(ctx, s.keys.Control(), protocol.ManagerGroup, msg.ID)
		}
	}
}

// hasInput reports whether a worker's input stream holds entries its group
// has not delivered yet, or entries delivered but not acknowledged.
func (s *Spawner) hasInput(ctx context.Context, id string) bool {
	kind, stream, group := s.inputOf(id, map[string]string{
		protocol.StatusFieldKind: s.rdb.HGet(ctx, s.keys.Status(id), protocol.StatusFieldKind).Val()})
	groups, err := s.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g.Name != group {
			continue
		}
		if g.Pending > 0 && kind == protocol.KindLongLived {
			return true
		}
		last, err := s.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
		return err == nil && len(last) == 1 && idLess(g.LastDeliveredID, last[0].ID)
	}
	return false
}

// wakeOnInput unpauses every paused worker whose input holds a task: a new
// task wakes its worker within milliseconds, and a task that arrived while
// a pause was in flight is never stranded.
func (s *Spawner) wakeOnInput(ctx context.Context) {
	s.everyWorker(ctx, 50*time.Millisecond, func(ctx context.Context, id string) {
		if s.rdb.HGet(ctx, s.keys.Status(id), protocol.StatusFieldContainer).Val() != string(protocol.ContainerPaused) {
			return
		}
		if s.hasInput(ctx, id) {
			if err := s.Unpause(ctx, id); err != nil {
				s.log.Warn("wake on input", "worker_id", id, "err", err)
			}
		}
	})
}

// everyWorker calls fn for each worker of the workers set, every interval,
// until ctx ends.
func (s *Spawner) everyWorker(ctx context.Context, interval time.Duration, fn func(ctx context.Context, id string)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ids, err := s.rdb.SMembers(ctx, s.keys.Workers()).Result()
		if err != nil {
			continue
		}
		for _, id := range ids {
			fn(ctx, id)
		}
	}
}

// Shutdown removes every worker of this key prefix, in parallel: the
// manager, stopping, leaves no container behind.
func (s *Spawner) Shutdown(ctx context.Context) error {
	ws, err := s.List(ctx)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, w := range ws {
		g.Go(func() error {
			if err := s.Delete(gctx, w.WorkerID); err != nil && !IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	return g.Wait()
}

// idLess orders two stream entry ids ("ms-seq").
func idLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	if len(am) != len(bm) {
		return len(am) < len(bm)
	}
	if am != bm {
		return am < bm
	}
	if len(as) != len(bs) {
		return len(as) < len(bs)
	}
	return as < bs
}
