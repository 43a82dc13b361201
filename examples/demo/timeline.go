package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
)

// timeline is what the demo prints: its own lines and every lifecycle,
// progress and output entry of the runtime's streams, each stamped with
// the time since the start. It knows the workers by their display names,
// and hands each worker's lifecycle events on to waitEvent.
//
// The watcher's goroutine (watch) and the demo's stages both write to
// it; mu keeps their lines whole and guards the maps.
type timeline struct {
	out   io.Writer
	start time.Time

	mu     sync.Mutex
	names  map[string]string              // worker id → display name
	events map[string]chan protocol.Event // worker id → its lifecycle events
}

func newTimeline(out io.Writer, start time.Time) *timeline {
	return &timeline{out: out, start: start, names: map[string]string{}, events: map[string]chan protocol.Event{}}
}

func (t *timeline) say(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%6.1fs  %s\n", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
}

func (t *timeline) section(title string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "\n== %s\n", title)
}

// block prints what write writes as one piece: no entry of the watcher
// comes between its lines (a table).
func (t *timeline) block(write func(w io.Writer) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return write(t.out)
}

func (t *timeline) name(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n, ok := t.names[id]; ok {
		return n
	}
	return short(id)
}

// register gives a worker its display name and starts keeping its
// lifecycle events.
func (t *timeline) register(id, name string) {
	t.mu.Lock()
	t.names[id] = name
	t.mu.Unlock()
	t.channel(id)
}

// channel is where the worker's lifecycle events wait for waitEvent.
func (t *timeline) channel(id string) chan protocol.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.events[id]; !ok {
		t.events[id] = make(chan protocol.Event, 64)
	}
	return t.events[id]
}

// waitEvent waits for a lifecycle event of the worker.
func (t *timeline) waitEvent(ctx context.Context, id string, want protocol.Event, timeout time.Duration) error {
	evs := t.channel(id)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case e := <-evs:
			if e == want {
				return nil
			}
		case <-deadline.C:
			return fmt.Errorf("worker %s: no %s event within %v", t.name(id), want, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watch prints the lifecycle and output streams as a timeline until the
// returned function is called.
func (t *timeline) watch(ctx context.Context, rdb *redis.Client, keys protocol.Keys) (stop func()) {
	watchCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		w := &client.Watcher{Redis: rdb, Keys: keys, Rescan: 100 * time.Millisecond}
		done <- w.Run(watchCtx, t.print)
	}()
	return func() { cancel(); <-done }
}

// print is the timeline: every lifecycle, progress and output entry.
func (t *timeline) print(ev client.Event) {
	if ev.Err != nil {
		t.say("stream %s: entry %s refused: %v", ev.Stream, ev.ID, ev.Err)
		return
	}
	id := ev.WorkerID()
	evs := t.channel(id)
	n := t.name(id)
	switch {
	case ev.Lifecycle != nil:
		l := ev.Lifecycle
		t.say("%-8s lifecycle %-15s from %s%s", n, l.Event, l.Source, lifecycleDetail(l))
		select {
		case evs <- l.Event:
		default:
		}
	case ev.Progress != nil:
		p := ev.Progress
		pct := ""
		if p.ProgressPct != nil {
			pct = fmt.Sprintf(" %d%%", *p.ProgressPct)
		}
		t.say("%-8s progress  %q%s %s", n, p.Step, pct, p.Output)
	case ev.Output != nil:
		o := ev.Output
		sess := ""
		if o.Session != nil {
			sess = fmt.Sprintf(", %s session (%s)", o.Session.Action, o.Session.Reason)
		}
		what := "result " + compact(o.Result)
		if o.Error != nil {
			what = string(o.Error.Code) + " (" + o.Error.Message + ")"
		}
		t.say("%-8s output    %s %s %s, session %s%s", n, o.RequestID, o.Status, what, short(o.SessionID), sess)
		t.say("%-8s           tokens in %d out %d cache %d/%d, context %d, $%.4f, %d ms", n, o.Usage.Input, o.Usage.Output,
			o.Usage.CacheRead, o.Usage.CacheCreation, o.ContextTokens, o.CostUSD, o.DurationMS)
	}
}

// lifecycleDetail is what the timeline adds to a lifecycle event's line.
func lifecycleDetail(l *protocol.Lifecycle) string {
	switch l.Event {
	case protocol.EventCreated:
		return fmt.Sprintf(" (container %s)", short(fmt.Sprint(l.Detail["container_id"])))
	case protocol.EventStarted:
		return " (the wrapper reads its input stream)"
	case protocol.EventTaskStarted:
		return " " + l.RequestID
	case protocol.EventPauseRequested:
		return " (the wrapper asks the manager on worker:control)"
	case protocol.EventUnpaused:
		return " (input arrived)"
	case protocol.EventDied, protocol.EventStopped:
		if c, ok := l.Detail["exit_code"]; ok {
			return fmt.Sprintf(" (exit %v)", c)
		}
	}
	return ""
}

func short(s string) string { return s[:min(8, len(s))] }

func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
