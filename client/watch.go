package client

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/protocol"
)

// Event is one decoded entry of the worker streams: a lifecycle event, a
// progress event or an output. Exactly one of Lifecycle, Progress and
// Output is set, unless Err says why the entry could not be decoded (Data
// then holds it as read).
type Event struct {
	Stream    string
	ID        string // the stream entry id
	Type      protocol.Type
	Lifecycle *protocol.Lifecycle
	Progress  *protocol.Progress
	Output    *protocol.Output
	// Permission is a worker asking whether its agent may make a tool
	// call (AGENT_APPROVAL).
	Permission *protocol.PermissionRequest
	Data       []byte
	Err        error
}

// WorkerID is the worker the event is about.
func (e Event) WorkerID() string {
	switch {
	case e.Lifecycle != nil:
		return e.Lifecycle.WorkerID
	case e.Progress != nil:
		return e.Progress.WorkerID
	case e.Output != nil:
		return e.Output.WorkerID
	case e.Permission != nil:
		return e.Permission.WorkerID
	}
	return ""
}

// Watcher follows worker:lifecycle and the output streams of the workers
// (their progress and outputs), those that exist when it starts and those
// created while it runs, and the developer queue's output stream. It reads
// without a consumer group: any number of watchers see every entry.
type Watcher struct {
	Redis redis.Cmdable
	Keys  protocol.Keys
	// FromStart replays what the streams hold before following them;
	// otherwise only entries added after Run starts are delivered.
	FromStart bool
	// Workers restricts the output streams to these workers (the lifecycle
	// stream is filtered to them too); empty means every worker.
	Workers []string
	// Rescan is how often the workers set is read for new workers
	// (default 1 s); a lifecycle "created" event adds its worker at once.
	Rescan time.Duration
}

// Run calls fn for every entry, in stream order per stream, until ctx ends
// (then it returns nil) or Redis fails (then the error).
func (w *Watcher) Run(ctx context.Context, fn func(Event)) error {
	only := map[string]bool{}
	for _, id := range w.Workers {
		only[id] = true
	}
	r := streams{c: w.Redis}
	cursor := map[string]string{} // stream → last id read
	order := []string{}
	add := func(stream string, fromStart bool) error {
		if _, ok := cursor[stream]; ok {
			return nil
		}
		last := "0-0"
		if !fromStart {
			var err error
			if last, err = r.lastID(ctx, stream); err != nil {
				return err
			}
		}
		cursor[stream] = last
		order = append(order, stream)
		return nil
	}
	scan := func(fromStart bool) error {
		ids := w.Workers
		if len(ids) == 0 {
			var err error
			if ids, err = w.Redis.SMembers(ctx, w.Keys.Workers()).Result(); err != nil {
				return err
			}
		}
		for _, id := range ids {
			if err := add(w.Keys.Output(id), fromStart); err != nil {
				return err
			}
		}
		return nil
	}
	if err := add(w.Keys.Lifecycle(), w.FromStart); err != nil {
		return ignoreEnd(ctx, err)
	}
	if len(w.Workers) == 0 {
		if err := add(w.Keys.DeveloperOutput(), w.FromStart); err != nil {
			return ignoreEnd(ctx, err)
		}
	}
	if err := scan(w.FromStart); err != nil {
		return ignoreEnd(ctx, err)
	}
	rescan := w.Rescan
	if rescan <= 0 {
		rescan = time.Second
	}
	lastScan := time.Now()
	for ctx.Err() == nil {
		if time.Since(lastScan) >= rescan {
			// A worker found now was created after Run started: all its
			// entries are new.
			if err := scan(true); err != nil {
				return ignoreEnd(ctx, err)
			}
			lastScan = time.Now()
		}
		streams := make([]string, 0, 2*len(order))
		streams = append(streams, order...)
		for _, s := range order {
			streams = append(streams, cursor[s])
		}
		res, err := r.read(ctx, streams, 200*time.Millisecond, 100)
		if err != nil {
			return ignoreEnd(ctx, err)
		}
		for _, st := range res {
			for _, m := range st.Messages {
				cursor[st.Stream] = m.ID
				ev := DecodeEvent(st.Stream, m)
				if len(only) > 0 && ev.Lifecycle != nil && !only[ev.Lifecycle.WorkerID] {
					continue
				}
				if ev.Lifecycle != nil && ev.Lifecycle.Event == protocol.EventCreated && len(only) == 0 {
					if err := add(w.Keys.Output(ev.Lifecycle.WorkerID), true); err != nil {
						return ignoreEnd(ctx, err)
					}
				}
				fn(ev)
			}
		}
	}
	return nil
}

func ignoreEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// DecodeEvent decodes one entry of a lifecycle or output stream.
func DecodeEvent(stream string, m redis.XMessage) Event {
	ev := Event{Stream: stream, ID: m.ID}
	data, err := protocol.EntryData(m.Values)
	if err != nil {
		ev.Err = err
		return ev
	}
	ev.Data = data
	_, typ, err := protocol.PeekType(data)
	if err != nil {
		ev.Err = err
		return ev
	}
	ev.Type = typ
	switch typ {
	case protocol.TypeLifecycle:
		l, err := protocol.DecodeLifecycle(data)
		ev.Lifecycle, ev.Err = &l, err
	case protocol.TypeProgress:
		p, err := protocol.DecodeProgress(data)
		ev.Progress, ev.Err = &p, err
	case protocol.TypeOutput:
		o, err := protocol.DecodeOutput(data)
		ev.Output, ev.Err = &o, err
	case protocol.TypePermissionRequest:
		p, err := protocol.DecodePermissionRequest(data)
		ev.Permission, ev.Err = &p, err
	default:
		ev.Err = errors.New("client: unexpected entry type " + string(typ) + " on " + stream)
	}
	if ev.Err != nil {
		ev.Lifecycle, ev.Progress, ev.Output, ev.Permission = nil, nil, nil, nil
	}
	return ev
}
