package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/spawner/ops"

	"github.com/chromedp/chromedp"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/dashboard"
	"github.com/agentvisor/agentvisor/spawner/spawnertest"
	"github.com/agentvisor/agentvisor/stubmodel"
	"github.com/agentvisor/agentvisor/testkit"
)

// statusLog records the status of each POST the server answered.
type statusLog struct {
	mu  sync.Mutex
	got []string
}

func (s *statusLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w, code: 200}
		next.ServeHTTP(rec, r)
		if r.Method == http.MethodPost {
			s.mu.Lock()
			s.got = append(s.got, fmt.Sprintf("%s %d", r.URL.Path, rec.code))
			s.mu.Unlock()
		}
	})
}

func (s *statusLog) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) { w.code = code; w.ResponseWriter.WriteHeader(code) }
func (w *statusWriter) Flush()               { w.ResponseWriter.(http.Flusher).Flush() }

// The per-worker page as an operator uses it, in headless Chromium,
// against a live runtime whose Claude workers ask before a tool call
// ALLOWED_COMMANDS does not allow (AGENT_APPROVAL, the real claude
// against the stub model): the task's progress appears as it happens;
// clicking Allow on its permission request lets the command run; a page
// of another origin cannot act (403), nor a request without the
// credential (401); clicking Cancel ends a running task within 2 s;
// Resume and Pause move the worker.
// Each action is on the lifecycle stream under the login's name. With
// DASHBOARD_SCREENSHOTS=dir it writes the worker page's pictures there.
func TestDashboardControlInChromium(t *testing.T) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (make setup installs Debian's): ", err)
	}
	rt := spawnertest.Start(t, func(c *spawner.Config) {
		c.WorkerEnv = map[string]string{"AGENT_APPROVAL": "true", "AGENT_PERSISTENT": "true"}
		c.BaseImage = testkit.WorkerBaseImage() // the one this checkout's test binary built
	})
	ctx := context.Background()
	r, err := (&client.Commands{Redis: rt.RC, Keys: rt.Keys, Timeout: 3 * time.Minute}).Do(ctx, protocol.Command{Action: protocol.ActionCreate,
		Spec: &protocol.WorkerSpec{AgentType: protocol.AgentClaude, ProjectID: "shop", AllowedCommands: []string{protocol.ProgressCommand}}})
	if err != nil {
		t.Fatal(err)
	}
	worker := r.Worker.WorkerID

	d := &dashboard.Dashboard{Redis: rt.RC, Keys: rt.Keys, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), StateEvery: 250 * time.Millisecond}
	token := ops.NewToken()
	posts := &statusLog{}
	srv := httptest.NewServer(posts.wrap(ops.RequireToken(token, d.Handler())))
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.WindowSize(1400, 900))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 4*time.Minute)
	defer tcancel()
	within := func(d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) time.Duration {
		t.Helper()
		start := time.Now()
		wctx, cancel := context.WithTimeout(bctx, d)
		defer cancel()
		if err := chromedp.Do(wctx, actions...); err != nil {
			// What the worker wrote, to tell a page that missed it from a worker that did not write it.
			msgs, _ := rt.RC.XRange(ctx, rt.Keys.Output(worker), "-", "+").Result()
			for _, m := range msgs {
				t.Logf("output stream: %v", m.Values)
			}
			t.Fatalf("%s (within %v): %v", what, d, err)
		}
		return time.Since(start)
	}
	shot := func(name string) {
		dir := os.Getenv("DASHBOARD_SCREENSHOTS")
		if dir == "" {
			return
		}
		if !filepath.IsAbs(dir) {
			_, file, _, _ := runtime.Caller(0)
			dir = filepath.Join(filepath.Dir(file), "..", "..", dir)
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The browser starts in bctx (a context derived from it would close
	// the tab when it ends).
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/login?token="+token+"&operator=alice")); err != nil {
		t.Fatal(err)
	}
	within(time.Minute, "the worker page opens", chromedp.Navigate(srv.URL+"/workers/"+worker), chromedp.WaitVisible(chromedp.CSS(`#conn.live`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="idle"]`)))

	tasks := &client.Tasks{Redis: rt.RC, Keys: rt.Keys}
	finalStep := &stubmodel.Step{Text: `{"status": "complete", "result": {"done": true}}`}
	progress := func(step string) stubmodel.Step {
		return stubmodel.Step{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{
			"command": fmt.Sprintf(`worker-wrapper progress --step %q --pct 40`, step), "description": "progress"}}}
	}

	// Allow: the task's progress is on the page as it happens, then its
	// permission request; Allow lets the command run.
	rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{
		progress("Reading the code"),
		{ToolUse: &stubmodel.ToolUse{Name: "Bash", Input: map[string]any{"command": "touch /tmp/allowed && echo ALLOWED-$((6*7))", "description": "asks first"}}},
	}, Fallback: finalStep})
	allowTask, err := tasks.Send(ctx, worker, protocol.Task{RequestID: "t-allow", ProjectID: "shop", Prompt: "Fix it."})
	if err != nil {
		t.Fatal(err)
	}
	within(90*time.Second, "the task's progress on the page",
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="transcript"]/li[contains(@class,"progress")][contains(., "Reading the code")]`)))
	within(90*time.Second, "the permission request on the page",
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.permission.pending button.allow`)))
	shot("dashboard-worker.png")
	within(10*time.Second, "click Allow", chromedp.Click(chromedp.CSS(`#transcript li.permission.pending button.allow`)))
	within(90*time.Second, "the allowed task's output on the page",
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.output.complete`)))
	if o, err := tasks.Await(ctx, allowTask, nil); err != nil || o.Status != protocol.StatusComplete {
		t.Fatalf("allowed task: %+v %v", o, err)
	}
	ran := false
	for _, req := range rt.Stub.Requests() {
		ran = ran || strings.Contains(req.Text(), "ALLOWED-42")
	}
	if !ran {
		t.Error("the allowed command's output (ALLOWED-42) never reached the model: it did not run")
	}
	checkRecorded(t, rt, worker, "allow", "t-allow")

	// A running task: another origin's page cannot cancel it, with the
	// browser's cookie (same site: 127.0.0.1) or without any.
	rt.Stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{progress("Working slowly"), {DelayMS: 30000, Text: finalStep.Text}}, Fallback: finalStep})
	cancelTask, err := tasks.Send(ctx, worker, protocol.Task{RequestID: "t-cancel", ProjectID: "shop", Prompt: "Take your time."})
	if err != nil {
		t.Fatal(err)
	}
	within(90*time.Second, "the running task on the page",
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="transcript"]/li[contains(., "Working slowly")]`)),
		chromedp.WaitEnabled(chromedp.CSS(`#cancel`)))
	inputBefore := rt.RC.XLen(ctx, rt.Keys.Input(worker)).Val()
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><script>
			const u = %q;
			Promise.all([
				fetch(u, {method: "POST", credentials: "include", mode: "no-cors", body: "{}"}),
				fetch(u, {method: "POST", credentials: "omit", mode: "no-cors", body: "{}"}),
			]).finally(() => { document.title = "sent"; });
		</script>`, srv.URL+"/workers/"+worker+"/cancel")
	}))
	defer evil.Close()
	within(30*time.Second, "the other origin's page", chromedp.Navigate(evil.URL))
	ectx, ecancel := context.WithTimeout(bctx, 30*time.Second)
	defer ecancel()
	if _, err := chromedp.Run(ectx, chromedp.Poll[bool](`document.title === "sent"`)); err != nil {
		t.Fatalf("the other origin's page did not send its requests: %v", err)
	}
	got := posts.list()
	want := []string{"/workers/" + worker + "/cancel 403", "/workers/" + worker + "/cancel 401"}
	for _, w := range want {
		if !contains(got, w) {
			t.Errorf("the other origin's requests: %q, want %q among them", got, w)
		}
	}
	if n := rt.RC.XLen(ctx, rt.Keys.Input(worker)).Val(); n != inputBefore {
		t.Fatalf("the refused requests wrote to the worker's input: %d → %d entries", inputBefore, n)
	}

	// Cancel: back on the page, the click ends the task within 2 s.
	within(30*time.Second, "the worker page again", chromedp.Navigate(srv.URL+"/workers/"+worker),
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="transcript"]/li[contains(., "Working slowly")]`)),
		chromedp.WaitEnabled(chromedp.CSS(`#cancel`)))
	took := within(2*time.Second, "the task cancelled on the page within 2 s of the click",
		chromedp.Click(chromedp.CSS(`#cancel`)), chromedp.WaitVisible(chromedp.CSS(`#transcript li.output.cancelled`)))
	t.Logf("click Cancel → cancelled output on the page: %v", took.Round(time.Millisecond))
	if o, err := tasks.Await(ctx, cancelTask, nil); err != nil || o.Status != protocol.StatusCancelled {
		t.Fatalf("cancelled task: %+v %v", o, err)
	}
	checkRecorded(t, rt, worker, "cancel", "t-cancel")
	within(10*time.Second, "the actions in the worker's events",
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="activity"]/li[contains(., "cancel by alice")]`)))
	shot("dashboard-worker-cancelled.png")

	// Resume and Pause: the worker, paused after its task, runs again,
	// then is paused again, each by a command recorded under alice.
	within(60*time.Second, "the worker paused after its task", chromedp.WaitVisible(chromedp.CSS(`body[data-state="paused"]`)))
	within(60*time.Second, "Resume", chromedp.Click(chromedp.CSS(`#resume`)),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="action-status"][contains(., "resume: done by alice")]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="idle"]`)))
	within(60*time.Second, "Pause", chromedp.Click(chromedp.CSS(`#pause`)),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="action-status"][contains(., "pause: done by alice")]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="paused"]`)))
	checkRecorded(t, rt, worker, "resume", "")
	checkRecorded(t, rt, worker, "pause", "")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkRecorded finds the operator_action of action on the lifecycle
// stream, by alice, for the task.
func checkRecorded(t *testing.T, rt *spawnertest.Runtime, worker, action, request string) {
	t.Helper()
	evs, err := (&client.Fleet{Redis: rt.RC, Keys: rt.Keys}).Entries(context.Background(), rt.Keys.Lifecycle())
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if l := ev.Lifecycle; l != nil && l.Event == protocol.EventOperatorAction && l.WorkerID == worker && l.RequestID == request &&
			l.Detail["action"] == action && l.Detail["operator"] == "alice" && l.Detail["code"] == nil {
			return
		}
	}
	t.Errorf("no operator_action %s by alice for %s on the lifecycle stream", action, request)
}
