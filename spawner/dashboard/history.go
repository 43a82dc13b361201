package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// historyPerStream bounds how many recent entries of each output stream
// the history reads.
const historyPerStream = 500

// Finished is one task that ended, as the charts draw it.
type Finished struct {
	At         time.Time `json:"at"`
	ProjectID  string    `json:"project_id"`
	WorkerID   string    `json:"worker_id"`
	RequestID  string    `json:"request_id"`
	Status     string    `json:"status"`
	CostUSD    float64   `json:"cost_usd"`
	DurationMS int64     `json:"duration_ms"`
}

// History reads the outputs the output streams of the workers there are
// still hold (the last historyPerStream of each, the developer queue's
// included), oldest first: the tasks the charts draw. A worker's outputs
// go with its streams, so the charts show what the streams keep, not
// all time (the usage table has the totals).
func (d *Dashboard) History(ctx context.Context) ([]Finished, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	f := &client.Fleet{Redis: d.Redis, Keys: d.Keys}
	ids, err := f.Workers(ctx)
	if err != nil {
		return nil, err
	}
	statuses, err := f.Statuses(ctx, ids)
	if err != nil {
		return nil, err
	}
	project := map[string]string{}
	streams := map[string]bool{d.Keys.DeveloperOutput(): true}
	for _, ws := range statuses {
		project[ws.ID] = ws.Hash[protocol.StatusFieldProjectID]
		streams[d.Keys.OutputFor(protocol.Kind(ws.Hash[protocol.StatusFieldKind]), ws.ID)] = true
	}
	// One round trip for every stream.
	names := make([]string, 0, len(streams))
	for stream := range streams {
		names = append(names, stream)
	}
	reads, err := rdb.New(d.Redis, d.Keys).Newest(ctx, names, historyPerStream)
	if err != nil {
		return nil, err
	}
	out := []Finished{}
	for stream, msgs := range reads {
		for _, m := range msgs {
			ev := client.DecodeEvent(stream, m)
			if ev.Output == nil {
				continue
			}
			o := ev.Output
			p := o.ProjectID
			if p == "" {
				p = project[o.WorkerID]
			}
			out = append(out, Finished{At: o.Timestamp, ProjectID: p, WorkerID: o.WorkerID, RequestID: o.RequestID,
				Status: string(o.Status), CostUSD: o.CostUSD, DurationMS: o.DurationMS})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}

func (d *Dashboard) history(w http.ResponseWriter, r *http.Request) {
	h, err := d.History(r.Context())
	if err != nil {
		writeError(w, http.StatusBadGateway, protocol.CodeUpstreamUnavailable, "history: %v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h)
}
