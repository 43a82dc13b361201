package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// lifecycle reads the fleet's lifecycle stream: follow prints the events
// that tell the fleet's story as they come, since and waitEvent look back.
type lifecycle struct {
	rc   *redis.Client
	keys protocol.Keys
	tl   *timeline
}

// follow prints the lifecycle events that tell the fleet's story (new
// workers and where, lost hosts, failed tasks) until the returned stop.
func (l *lifecycle) follow(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	last := "$"
	if res, err := l.rc.XRevRangeN(ctx, l.keys.Lifecycle(), "+", "-", 1).Result(); err == nil && len(res) > 0 {
		last = res[0].ID
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			res, err := l.rc.XRead(ctx, &redis.XReadArgs{Streams: []string{l.keys.Lifecycle(), last}, Block: time.Second}).Result()
			if err != nil {
				continue
			}
			for _, m := range res[0].Messages {
				last = m.ID
				data, _ := protocol.EntryData(m.Values)
				ev, err := protocol.DecodeLifecycle(data)
				if err != nil {
					continue
				}
				switch ev.Event {
				case protocol.EventHostLost:
					l.tl.say("%s: host_lost (spawner, on a surviving host): its host %v stopped renewing", l.tl.name(ev.WorkerID), ev.Detail["host"])
				case protocol.EventCreated:
					go l.replacement(ctx, ev)
				case protocol.EventReplaceFailed:
					l.tl.say("%s: replace_failed %v", l.tl.name(ev.WorkerID), ev.Detail)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// replacement names a new worker that replaces another (its status hash
// says so a moment after its created event).
func (l *lifecycle) replacement(ctx context.Context, ev protocol.Lifecycle) {
	var old string
	waitFor(ctx, 3*time.Second, func() bool {
		old = l.rc.HGet(ctx, l.keys.Status(ev.WorkerID), protocol.StatusFieldReplaces).Val()
		return old != ""
	})
	if old == "" {
		return
	}
	name := l.tl.nameWorker(ev.WorkerID, ev.Host)
	l.tl.say("%s created on %s, replacing %s: the tasks waiting for %s moved to it", name, ev.Host, l.tl.name(old), l.tl.name(old))
}

// since reads the lifecycle events from t on, each stamped with the time
// its entry was added.
func (l *lifecycle) since(ctx context.Context, t time.Time) []protocol.Lifecycle {
	msgs, err := l.rc.XRange(ctx, l.keys.Lifecycle(), fmt.Sprint(t.UnixMilli()), "+").Result()
	if err != nil {
		return nil
	}
	var out []protocol.Lifecycle
	for _, m := range msgs {
		data, _ := protocol.EntryData(m.Values)
		if ev, err := protocol.DecodeLifecycle(data); err == nil {
			var ms int64
			fmt.Sscanf(m.ID, "%d-", &ms)
			ev.Timestamp = time.UnixMilli(ms)
			out = append(out, ev)
		}
	}
	return out
}

// waitEvent waits, up to bound, for the worker's event ev at since or after.
func (l *lifecycle) waitEvent(ctx context.Context, since time.Time, worker string, ev protocol.Event, bound time.Duration) error {
	if waitFor(ctx, bound, func() bool {
		for _, e := range l.since(ctx, since) {
			if e.WorkerID == worker && e.Event == ev {
				return true
			}
		}
		return false
	}) {
		return nil
	}
	return fmt.Errorf("no %s event of %s within %s", ev, l.tl.name(worker), bound)
}
