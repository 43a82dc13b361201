package faults

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/redisconn"
)

// Spec is the spec of a worker of the case: its agent is the fake one,
// which the managers' WORKER_ENV sets (a spec may not set AGENT_BIN).
func (c *Case) Spec(kind protocol.Kind) protocol.WorkerSpec {
	return protocol.WorkerSpec{AgentType: protocol.AgentClaude, Kind: kind}
}

// Send adds a command to the command stream (its id, reply stream and
// time filled in) and records it; it returns the command id.
func (c *Case) Send(cmd protocol.Command, expect Expect, what string) string {
	c.T.Helper()
	cmd.ID = c.next("cmd-" + string(cmd.Action))
	cmd.ReplyTo, cmd.Timestamp = c.replies, time.Now().UTC()
	doc, err := cmd.Encode()
	if err != nil {
		c.T.Fatal(err)
	}
	c.L.Add(&Request{ID: cmd.ID, Command: true, What: what, Expect: expect, Sent: time.Now()})
	if err := c.add(c.Keys.Commands(), doc); err != nil {
		c.T.Fatalf("send %s: %v", cmd.ID, err)
	}
	return cmd.ID
}

// SendCreate sends a create command for a worker of kind.
func (c *Case) SendCreate(kind protocol.Kind, expect Expect) string {
	spec := c.Spec(kind)
	return c.Send(protocol.Command{Action: protocol.ActionCreate, Spec: &spec}, expect, "create")
}

// Create creates a worker as set-up (not as the fault's subject): the test
// fails when it is not served within bound.
func (c *Case) Create(kind protocol.Kind, bound time.Duration) string {
	c.T.Helper()
	return c.CreateMany(1, kind, bound)[0]
}

// CreateMany sends n creates at once and returns the workers' ids.
func (c *Case) CreateMany(n int, kind protocol.Kind, bound time.Duration) []string {
	c.T.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, c.SendCreate(kind, ReplyOK))
	}
	if _, ok := c.WaitAnswered(ids, bound); !ok {
		c.T.Fatalf("set-up: %d creates not all answered within %s", n, bound)
	}
	var workers []string
	for _, id := range ids {
		a := c.First(id)
		if !a.OK || a.Worker == "" {
			c.T.Fatalf("set-up: create %s answered %s", id, a.Desc)
		}
		workers = append(workers, a.Worker)
	}
	return workers
}

// Task adds a task to a long-lived worker's input (to the developer queue
// when worker is "") and records it; it returns the request id. The fake
// agent reads its prompt: "fake:sleep-3000" runs 3 s.
func (c *Case) Task(worker, prompt string, expect Expect) string {
	c.T.Helper()
	return c.TaskAs(c.next("task"), worker, prompt, expect, "")
}

// TaskAs is Task with the request id given, and what the task is for the
// notes ("" says where it went).
func (c *Case) TaskAs(req, worker, prompt string, expect Expect, what string) string {
	c.T.Helper()
	stream, where := c.Keys.DeveloperInput(), "task on the developer queue"
	if worker != "" {
		stream, where = c.Keys.Input(worker), "task on "+short(worker)
	}
	if what == "" {
		what = where
	}
	doc, err := protocol.NewTask(req, prompt).Encode()
	if err != nil {
		c.T.Fatal(err)
	}
	c.L.Add(&Request{ID: req, What: what, Expect: expect, Sent: time.Now()})
	if err := c.add(stream, doc); err != nil {
		c.T.Fatalf("send %s: %v", req, err)
	}
	return req
}

// add adds a request's entry as a client does. On a Sentinel deployment
// it waits for the replica (redisconn.XAdd: a failover loses no entry
// once added), and retries for 30 s an add that failed (the primary gone
// mid-failover; an add whose reply alone was lost is then made twice, as
// by any client that retries: the runtime answers a request id once).
func (c *Case) add(stream string, doc []byte) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := redisconn.XAdd(ctx, c.RC, c.Wait, &redis.XAddArgs{Stream: stream, Values: protocol.Values(doc)})
		cancel()
		if err == nil || redisconn.IsNotReplicated(err) {
			return nil
		}
		if c.Sentinel == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// answers reads the case's answers; while Redis is down it returns nil.
func (c *Case) answers() map[string][]Answer {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := c.L.Answers(ctx)
	if err != nil {
		return nil
	}
	return a
}

// First returns the first answer to a request (zero when none).
func (c *Case) First(id string) Answer {
	if as := c.answers()[id]; len(as) > 0 {
		return as[0]
	}
	return Answer{}
}

// WaitAnswered waits until every request of ids has an answer, or bound
// passes; the bound becomes their deadline (a later answer is late). It
// returns when the last first answer came, and whether every request was
// answered in time with what it expects (a task of a healthy worker
// answered failed is answered, and not served).
func (c *Case) WaitAnswered(ids []string, bound time.Duration) (time.Time, bool) {
	c.L.SetDeadline(ids, time.Now().Add(bound))
	var last time.Time
	served := true
	answered := c.waitFor(bound, func() bool {
		as := c.answers()
		if as == nil {
			return false
		}
		last, served = time.Time{}, true
		for _, id := range ids {
			if len(as[id]) == 0 {
				return false
			}
			a := as[id][0]
			if a.At.After(last) {
				last = a.At
			}
			if r := c.L.Get(id); r != nil && !r.Expect.Met(a) {
				served = false
			}
		}
		return true
	})
	return last, answered && served
}

// WaitEvent waits for a lifecycle event of worker (any worker when "")
// about request req (any when "") and returns when Redis stored it.
func (c *Case) WaitEvent(worker string, ev protocol.Event, req string, bound time.Duration) (time.Time, bool) {
	return c.WaitEventSince(time.Time{}, worker, ev, req, bound)
}

// WaitEventSince is WaitEvent for an event stored at or after since.
func (c *Case) WaitEventSince(since time.Time, worker string, ev protocol.Event, req string, bound time.Duration) (time.Time, bool) {
	l, ok := c.Event(since, worker, ev, req, bound)
	return l.Timestamp, ok
}

// Event waits for a lifecycle event as WaitEventSince does and returns
// it, its Timestamp set to when Redis stored it.
func (c *Case) Event(since time.Time, worker string, ev protocol.Event, req string, bound time.Duration) (protocol.Lifecycle, bool) {
	var found protocol.Lifecycle
	ok := c.waitFor(bound, func() bool {
		msgs, err := c.RC.XRange(context.Background(), c.Keys.Lifecycle(), "-", "+").Result()
		if err != nil {
			return false
		}
		for _, m := range msgs {
			data, _ := protocol.EntryData(m.Values)
			var l protocol.Lifecycle
			if json.Unmarshal(data, &l) != nil {
				continue
			}
			at := entryTime(m.ID)
			if l.Event == ev && (worker == "" || l.WorkerID == worker) && (req == "" || l.RequestID == req) && !at.Before(since.Truncate(time.Millisecond)) {
				found, found.Timestamp = l, at
				return true
			}
		}
		return false
	})
	return found, ok
}

// ErrNoAnswer is returned by WaitOne when no answer came within the bound.
var ErrNoAnswer = errors.New("faults: no answer within the bound")

// WaitOne waits for the answer to one request (whatever it says).
func (c *Case) WaitOne(id string, bound time.Duration) (Answer, error) {
	c.WaitAnswered([]string{id}, bound)
	if as := c.answers()[id]; len(as) > 0 {
		return as[0], nil
	}
	return Answer{}, ErrNoAnswer
}
