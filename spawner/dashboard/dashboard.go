// Package dashboard is the worker-manager's live page: the workers, a
// timeline of lifecycle, progress and output events, usage and cost per
// project, the creation queue and the managers. It is plain static files
// (go:embed, no build step) fed by one server-sent-events stream: the
// page never polls. Every figure is read from Redis, so any manager's
// dashboard shows the whole key prefix.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/ctlplane"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

//go:embed static
var static embed.FS

// Dashboard serves the page (/), a page per worker (/workers/{id}), their
// files (/static/), the stream (/events), the task history the charts
// draw (/history) and the actions (actions.go).
type Dashboard struct {
	Redis redis.Cmdable
	Keys  protocol.Keys
	Log   *slog.Logger
	// StateEvery is how often the state (workers, usage, queue, managers)
	// is pushed to each open page (default 1 s).
	StateEvery time.Duration
	// Recent is how many lifecycle entries a page gets when it opens
	// (default 50).
	Recent int64
	// Wait is WAIT's policy for the documents the actions write (zero:
	// no WAIT), as client.Tasks.Wait.
	Wait protocol.WaitPolicy
	// CommandTimeout bounds how long a pause, resume or delete waits for
	// the manager's reply (default 1 min).
	CommandTimeout time.Duration
}

// Handler returns the dashboard's routes.
func (d *Dashboard) Handler() http.Handler {
	files, _ := fs.Sub(static, "static")
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(files)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.HandleFunc("GET /workers/{id}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, files, "worker.html")
	})
	mux.HandleFunc("GET /history", d.history)
	d.actionRoutes(mux)
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		st, err := d.State(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /events", d.events)
	mux.HandleFunc("GET /runs/{id}", d.run)
	mux.HandleFunc("GET /runs/{id}/events", d.runEvents)
	return mux
}

// Worker is a row of the workers table.
type Worker struct {
	protocol.WorkerInfo
	Host            string  `json:"host"`
	HeartbeatAgeSec float64 `json:"heartbeat_age_s"` // -1: no heartbeat
}

// Usage is a project's cumulative usage.
type Usage struct {
	ProjectID string  `json:"project_id"`
	Tasks     int64   `json:"tasks"`
	Input     int64   `json:"input"`
	Output    int64   `json:"output"`
	CostUSD   float64 `json:"cost_usd"`
}

// State is what the page shows besides the timeline.
type State struct {
	Workers  []Worker                `json:"workers"`
	Usage    []Usage                 `json:"usage"`
	Queue    []string                `json:"queue"` // create command ids waiting for a slot, in order
	Managers []ctlplane.ManagerState `json:"managers"`
	At       time.Time               `json:"at"`
}

// State reads the state from Redis.
func (d *Dashboard) State(ctx context.Context) (State, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st := State{Workers: []Worker{}, Usage: []Usage{}, At: time.Now().UTC()}
	f := &client.Fleet{Redis: d.Redis, Keys: d.Keys}
	ids, err := f.Workers(ctx)
	if err != nil {
		return st, fmt.Errorf("dashboard: %w", err)
	}
	statuses, err := f.Statuses(ctx, ids)
	if err != nil {
		return st, fmt.Errorf("dashboard: %w", err)
	}
	for _, ws := range statuses {
		w := Worker{WorkerInfo: protocol.WorkerInfoFromStatus(ws.ID, ws.Hash), Host: ws.Hash[protocol.StatusFieldManagerID], HeartbeatAgeSec: -1}
		if ws.Heartbeat != nil {
			w.HeartbeatAgeSec = time.Since(ws.Heartbeat.Timestamp).Seconds()
		}
		st.Workers = append(st.Workers, w)
	}
	if st.Queue, err = rdb.New(d.Redis, d.Keys).QueuedCreates(ctx, 100); err != nil {
		return st, fmt.Errorf("dashboard: %w", err)
	}
	if st.Queue == nil {
		st.Queue = []string{}
	}
	projects, err := f.UsageProjects(ctx, 200)
	if err != nil {
		return st, fmt.Errorf("dashboard: %w", err)
	}
	for _, p := range projects {
		u, err := f.Usage(ctx, p)
		if err != nil {
			return st, fmt.Errorf("dashboard: %w", err)
		}
		st.Usage = append(st.Usage, Usage{ProjectID: p, Tasks: u.Tasks, Input: u.Input, Output: u.Output, CostUSD: u.CostUSD})
	}
	if st.Managers, err = rdb.New(d.Redis, d.Keys).ListManagers(ctx); err != nil {
		return st, err
	}
	return st, nil
}

// entry is one timeline line as the page gets it.
type entry struct {
	Stream string          `json:"stream"`
	ID     string          `json:"id"`
	Doc    json.RawMessage `json:"doc,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// events is the page's stream: "entry" events (the recent lifecycle
// entries first, then every new lifecycle and output entry as a Watcher
// reads it) and a "state" event every StateEvery.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	ctx := r.Context()
	var mu sync.Mutex // one writer at a time: the watcher's callback and the state ticker
	send := func(event string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		fl.Flush()
	}
	sendEntry := func(ev client.Event) {
		e := entry{Stream: ev.Stream, ID: ev.ID, Doc: ev.Data}
		if ev.Err != nil {
			e.Error = ev.Err.Error()
		}
		send("entry", e)
	}
	recent := d.Recent
	if recent <= 0 {
		recent = 50
	}
	if evs, err := (&client.Fleet{Redis: d.Redis, Keys: d.Keys}).Recent(ctx, d.Keys.Lifecycle(), recent); err == nil {
		for _, ev := range evs {
			sendEntry(ev)
		}
	}
	pushState := func() {
		if st, err := d.State(ctx); err == nil {
			send("state", st)
		} else if ctx.Err() == nil && d.Log != nil {
			d.Log.Warn("dashboard state", "err", err)
		}
	}
	pushState()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		wt := &client.Watcher{Redis: d.Redis, Keys: d.Keys, Rescan: 500 * time.Millisecond}
		if err := wt.Run(ctx, sendEntry); err != nil && d.Log != nil {
			d.Log.Warn("dashboard watcher", "err", err)
		}
	}()
	every := d.StateEvery
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			<-watchDone
			return
		case <-t.C:
			pushState()
		}
	}
}
