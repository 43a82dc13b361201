package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/dashboard"
	"github.com/agentvisor/agentvisor/testkit"
)

// A run polled (GET /runs/{id}) and followed (GET /runs/{id}/events) by a
// real HTTP client, behind the operator token: the record as the run hash
// holds it; the stream carries that run's progress and output only, and
// ends after its output, whether the output was there already or comes
// while the client waits.
func TestRunsPollingAndEvents(t *testing.T) {
	rc := testkit.NewRedisClient(t)
	keys := protocol.Keys{Prefix: "runstest"}
	ctx := context.Background()
	const worker = "w-1"
	rc.SAdd(ctx, keys.Workers(), worker)
	now := time.Now().UTC()
	put := func(doc interface{ Encode() ([]byte, error) }) {
		t.Helper()
		b, err := doc.Encode()
		if err != nil {
			t.Fatal(err)
		}
		testkit.XAdd(t, rc, keys.Output(worker), b)
	}
	progress := func(req, step string) protocol.Progress {
		return protocol.Progress{WorkerID: worker, RequestID: req, Step: step, Timestamp: now}
	}
	output := func(req string) protocol.Output {
		return protocol.Output{RequestID: req, WorkerID: worker, AgentType: protocol.AgentClaude, Status: protocol.StatusComplete,
			Result: json.RawMessage(`{"ok":true}`), Timestamp: now}
	}
	run := protocol.NewRun("r1", "", worker, "p", now)
	run.AgentSlug, run.Trigger, run.StepsTotal, run.StepsCompleted, run.CurrentStep = "claude", "cron", 4, 4, "finalize"
	run.State = protocol.RunCompleted
	rc.HSet(ctx, keys.Run("r1"), run.Hash())
	rc.HSet(ctx, keys.Run("r1"), protocol.RunFieldAttempt, 2)
	put(progress("r1", "half way"))
	put(progress("r2", "another run's step"))
	put(output("r1"))

	token := ops.NewToken()
	srv := httptest.NewServer(ops.RequireToken(token, (&dashboard.Dashboard{Redis: rc, Keys: keys}).Handler()))
	defer srv.Close()
	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	resp := get("/runs/r1")
	var rec map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	if resp.StatusCode != 200 || rec["status"] != "completed" || rec["worker_id"] != worker || rec["agent_slug"] != "claude" ||
		rec["trigger"] != "cron" || rec["steps_total"] != "4" || rec["steps_completed"] != "4" || rec["current_step"] != "finalize" ||
		rec["attempt"] != "2" {
		t.Fatalf("GET /runs/r1: %d %v", resp.StatusCode, rec)
	}
	for path, want := range map[string]int{"/runs/none": 404, "/runs/bad%20id": 400, "/runs/none/events": 404} {
		if resp := get(path); resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if resp, err := http.Get(srv.URL + "/runs/r1"); err != nil || resp.StatusCode != 401 {
		t.Errorf("GET /runs/r1 without the token: %v %v", resp.StatusCode, err)
	}

	events := func(path string, bound time.Duration) []string {
		t.Helper()
		done := make(chan []string, 1)
		go func() {
			resp := get(path)
			defer resp.Body.Close()
			var got []string
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			ev := ""
			for sc.Scan() {
				line := sc.Text()
				if e, ok := strings.CutPrefix(line, "event: "); ok {
					ev = e
				} else if d, ok := strings.CutPrefix(line, "data: "); ok {
					got = append(got, ev+" "+d)
				}
			}
			done <- got
		}()
		select {
		case got := <-done:
			return got
		case <-time.After(bound):
			t.Fatalf("GET %s did not end within %v", path, bound)
			return nil
		}
	}
	check := func(got []string, req, step string) {
		t.Helper()
		if len(got) != 3 || !strings.HasPrefix(got[0], "run ") || !strings.HasPrefix(got[1], "progress ") ||
			!strings.Contains(got[1], step) || !strings.HasPrefix(got[2], "output ") || !strings.Contains(got[2], `"request_id":"`+req+`"`) {
			t.Fatalf("events of %s: %q", req, got)
		}
	}
	check(events("/runs/r1/events", 10*time.Second), "r1", "half way")

	// A run still going: its events come as the worker writes them.
	rc.HSet(ctx, keys.Run("r3"), protocol.RunFieldRequestID, "r3", protocol.RunFieldWorkerID, worker, protocol.RunFieldStatus, "running")
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		time.Sleep(500 * time.Millisecond)
		put(progress("r3", "working"))
		put(output("r3"))
		rc.HSet(ctx, keys.Run("r3"), protocol.RunFieldStatus, "completed")
	}()
	check(events("/runs/r3/events", 10*time.Second), "r3", "working")
	<-wrote // the writer's last calls use the test's client
}
