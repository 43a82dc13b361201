package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// Runs for pollers and browsers, behind the operator's credential like
// the page: GET /runs/{id} is a run's record (its run hash), and
// GET /runs/{id}/events is a server-sent-events stream of that run's
// progress, permission requests, lifecycle events and output, from the
// start of its worker's streams, that ends after its output (or at its
// terminal state, should the output be gone).

var runID = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,256}$`)

// runRecord reads a run hash; it answers the request itself and returns
// nil when there is none.
func (d *Dashboard) runRecord(w http.ResponseWriter, r *http.Request) map[string]string {
	id := r.PathValue("id")
	if !runID.MatchString(id) {
		writeError(w, http.StatusBadRequest, protocol.CodeInvalidTask, "run id %q: want 1 to 256 letters, digits, '_', '.', ':', '-'", id)
		return nil
	}
	h, err := rdb.New(d.Redis, d.Keys).Run(r.Context(), id)
	if err != nil {
		writeError(w, http.StatusBadGateway, protocol.CodeUpstreamUnavailable, "redis: %v", err)
		return nil
	}
	if len(h) == 0 {
		writeError(w, http.StatusNotFound, protocol.CodeNotFound, "no run %s (never sent here, or past its retention)", id)
		return nil
	}
	return h
}

func (d *Dashboard) run(w http.ResponseWriter, r *http.Request) {
	if h := d.runRecord(w, r); h != nil {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h)
	}
}

func (d *Dashboard) runEvents(w http.ResponseWriter, r *http.Request) {
	h := d.runRecord(w, r)
	if h == nil {
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	id := r.PathValue("id")
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	send := func(event string, data []byte) {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
		fl.Flush()
	}
	rec, _ := json.Marshal(h)
	send("run", rec)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// The run's end: its output; or, should its output be gone from the
	// stream (trimmed), its terminal state, a second after it is seen.
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		terminal := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if terminal {
				cancel()
				return
			}
			st, err := rdb.New(d.Redis, d.Keys).RunStatus(ctx, id)
			terminal = err == nil && st.Terminal()
		}
	}()
	wt := &client.Watcher{Redis: d.Redis, Keys: d.Keys, FromStart: true, Workers: []string{h[protocol.RunFieldWorkerID]},
		Rescan: 500 * time.Millisecond}
	_ = wt.Run(ctx, func(ev client.Event) {
		switch {
		case ev.Output != nil && ev.Output.RequestID == id:
			send("output", ev.Data)
			cancel()
		case ev.Progress != nil && ev.Progress.RequestID == id:
			send("progress", ev.Data)
		case ev.Permission != nil && ev.Permission.RequestID == id:
			send("permission_request", ev.Data)
		case ev.Lifecycle != nil && ev.Lifecycle.RequestID == id:
			send("lifecycle", ev.Data)
		}
	})
}

// writeError answers with the protocol's error document.
func writeError(w http.ResponseWriter, status int, code protocol.Code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": protocol.NewError(code, format, args...)})
}
