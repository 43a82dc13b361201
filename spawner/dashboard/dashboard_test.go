package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/dashboard"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// The dashboard in headless Chromium (Debian's chromium): it lists the
// running workers of a live runtime, its charts draw the task that ran,
// and an event XADDed to a stream appears on the page within a second. With DASHBOARD_SCREENSHOT=path it
// also writes a screenshot there (the README's).
func TestDashboardInChromium(t *testing.T) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (make setup installs Debian's): ", err)
	}
	rt := spawnertest.Start(t, func(c *spawner.Config) { c.BaseImage = testkit.WorkerBaseImage() })
	ctx := context.Background()
	cli := &client.Commands{Redis: rt.RC, Keys: rt.Keys, Timeout: 3 * time.Minute}
	var ids []string
	for _, p := range []string{"shop", "docs"} {
		r, err := cli.Do(ctx, protocol.Command{Action: protocol.ActionCreate, Spec: &protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: p,
			AllowedCommands: []string{protocol.ProgressCommand}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Worker.WorkerID)
	}
	// A task with progress, so that the timeline and usage have rows.
	rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": `worker-wrapper progress --step "Reading the code" --pct 40`, "description": "progress"}}},
		{Text: `{"status": "complete", "result": {"fixed": true}}`},
	}})
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if o, err := (&client.Tasks{Redis: rt.RC, Keys: rt.Keys}).Run(tctx, ids[0], protocol.Task{ProjectID: "shop", Prompt: "Fix it."}, nil); err != nil || o.Status != protocol.StatusComplete {
		t.Fatalf("task: %+v %v", o, err)
	}
	if o, err := (&client.Tasks{Redis: rt.RC, Keys: rt.Keys}).Run(tctx, ids[1], protocol.Task{ProjectID: "docs", Prompt: "Write it."}, nil); err != nil || o.Status != protocol.StatusComplete {
		t.Fatalf("task: %+v %v", o, err)
	}

	d := &dashboard.Dashboard{Redis: rt.RC, Keys: rt.Keys, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), StateEvery: 250 * time.Millisecond}
	// Behind the operator token, as the manager serves it: the browser
	// logs in once (a cookie), then loads the page and its stream.
	token := ops.NewToken()
	srv := httptest.NewServer(ops.RequireToken(token, d.Handler()))
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.WindowSize(1400, 900))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, time.Minute)
	defer tcancel()

	// The page lists both workers, with their projects and the usage.
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/login?token="+token),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#workers tr[data-worker=%q]`, ids[0]))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#workers tr[data-worker=%q]`, ids[1]))),
		chromedp.WaitVisible(chromedp.CSS(`#conn.live`)),
	); err != nil {
		t.Fatalf("the page does not list the workers: %v", err)
	}
	// The charts draw the task: a line of project shop in the tasks and
	// cost charts, a bar of its duration.
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS(`#chart-tasks path.series[data-project="shop"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-cost path.series[data-project="shop"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-cost path.series[data-project="docs"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-durations rect.bar`)),
	); err != nil {
		t.Fatalf("the charts do not draw the task: %v", err)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	workers, usage, timeline := text("#workers"), text("#usage"), text("#timeline")
	for _, want := range []string{ids[0][:8], ids[1][:8], "shop", "docs", "claude"} {
		if !strings.Contains(workers, want) {
			t.Errorf("workers table lacks %q:\n%s", want, workers)
		}
	}
	if !strings.Contains(usage, "shop") || !strings.Contains(timeline, "created") {
		t.Errorf("usage:\n%s\ntimeline:\n%s", usage, timeline)
	}

	// An entry XADDed now is on the page within 1 s.
	pct := 70
	doc, err := protocol.Progress{Timestamp: time.Now(), WorkerID: ids[1], RequestID: "live-check", Step: "Appears at once", ProgressPct: &pct}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.RC.XAdd(ctx, &redis.XAddArgs{Stream: rt.Keys.Output(ids[1]), Values: protocol.Values(doc)}).Result()
	if err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	wctx, wcancel := context.WithTimeout(bctx, time.Second)
	defer wcancel()
	if err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#timeline li[data-id=%q]`, id)))); err != nil {
		t.Fatalf("the entry XADDed did not appear within 1 s: %v", err)
	}
	t.Logf("XADD → on the page: %v", time.Since(added).Round(time.Millisecond))

	if path := os.Getenv("DASHBOARD_SCREENSHOT"); path != "" {
		if !filepath.IsAbs(path) {
			_, file, _, _ := runtime.Caller(0)
			path = filepath.Join(filepath.Dir(file), "..", "..", path)
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
