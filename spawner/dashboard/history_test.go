package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/dashboard"
	"github.com/agentvisor/agentvisor/testkit"
)

// GET /history, what the charts draw: the outputs of the workers'
// streams, oldest first, with their project (from the worker's status
// when the output names none), cost and duration; other entries left out.
func TestDashboardHistory(t *testing.T) {
	rc := testkit.NewRedisClient(t)
	keys := protocol.Keys{Prefix: "histtest"}
	ctx := context.Background()
	for w, p := range map[string]string{"w-1": "shop", "w-2": "docs"} {
		rc.SAdd(ctx, keys.Workers(), w)
		rc.HSet(ctx, keys.Status(w), protocol.StatusFieldKind, string(protocol.KindLongLived), protocol.StatusFieldProjectID, p)
	}
	t0 := time.Now().UTC().Add(-time.Hour)
	out := func(w, req, project string, at time.Time, cost float64) {
		testkit.XAdd(t, rc, keys.Output(w), testkit.Doc(protocol.Output{RequestID: req, WorkerID: w, ProjectID: project, Status: protocol.StatusComplete,
			Result: json.RawMessage(`{}`), CostUSD: cost, DurationMS: 1500, Timestamp: at}))
	}
	out("w-1", "r-2", "shop", t0.Add(2*time.Minute), 0.02)
	testkit.XAdd(t, rc, keys.Output("w-1"), testkit.Doc(protocol.Progress{WorkerID: "w-1", RequestID: "r-3", Step: "not an output", Timestamp: t0}))
	out("w-2", "r-1", "", t0.Add(time.Minute), 0.01)

	token := ops.NewToken()
	srv := httptest.NewServer(ops.RequireToken(token, (&dashboard.Dashboard{Redis: rc, Keys: keys}).Handler()))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/history", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []dashboard.Finished
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /history: %d %v", resp.StatusCode, err)
	}
	if len(got) != 2 || got[0].RequestID != "r-1" || got[0].ProjectID != "docs" || got[0].CostUSD != 0.01 ||
		got[1].RequestID != "r-2" || got[1].ProjectID != "shop" || got[1].DurationMS != 1500 || got[1].Status != "complete" {
		t.Fatalf("history: %+v", got)
	}
	if resp, err := http.Get(srv.URL + "/history"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /history without the token: %v %v", resp.StatusCode, err)
	}
}
