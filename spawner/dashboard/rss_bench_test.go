package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/chromedp/chromedp"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/dashboard"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
)

// rssMB is this process's resident set size.
func rssMB(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// BenchmarkManagerRSSDashboard: the RSS of a process running a manager of
// 100 idle workers with /metrics and the dashboard served, before any
// client, and at most while the dashboard is open in headless Chromium
// (state pushed every second, the timeline following every stream) and
// /metrics is scraped every second, for 15 s. The process is the
// benchmark's: the manager plus the benchmark's own clients.
func BenchmarkManagerRSSDashboard(b *testing.B) {
	const n = 100
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		b.Fatal("chromium is not installed (make setup installs Debian's): ", err)
	}
	rt := spawnertest.Start(b, func(c *spawner.Config) {
		c.MaxWorkers, c.IdleTimeout = n, time.Hour
	})
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := rt.Spawner.Create(ctx, protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: fmt.Sprintf("p%d", i%10)}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("%d workers created in %v", n, time.Since(start).Round(time.Millisecond))
	m := spawner.NewMetrics(rt.RC, rt.Keys, 50)
	d := &dashboard.Dashboard{Redis: rt.RC, Keys: rt.Keys, Log: log}
	token := ops.NewToken()
	srv, addr, err := ops.Serve("127.0.0.1:0", m.Registry, d.Handler(), token, log)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	time.Sleep(5 * time.Second) // every wrapper up and beating
	before := rssMB(b)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Flag("headless", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/login?token="+token), chromedp.WaitVisible(chromedp.CSS(`#conn.live`))); err != nil {
		b.Fatal(err)
	}
	peak := before
	for i := 0; i < 15; i++ {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		time.Sleep(time.Second)
		peak = max(peak, rssMB(b))
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#workers tbody tr").length`))
	if err != nil || rows != n {
		b.Fatalf("the dashboard shows %d workers (%v), want %d", rows, err, n)
	}
	b.ReportMetric(peak, "manager-rss-dashboard-MB")
	b.ReportMetric(before, "manager-rss-before-dashboard-MB")
	b.Logf("RSS %.1f MB before the dashboard, %.1f MB at most while open", before, peak)
}
