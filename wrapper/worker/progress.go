package worker

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// ProgressTokenHeader carries the run's token: a progress call is accepted
// only from the run it belongs to, not from a process a previous task left.
const ProgressTokenHeader = "X-Worker-Progress-Token"

// progressServer is the local endpoint the agent reports progress to
// (POST /progress), asks its guard (POST /guard, permissions.go), and the
// wrapper's health endpoint (GET /healthz).
type progressServer struct {
	progressParams
	srv *http.Server
	ln  net.Listener
	url string
}

// progressParams are what the endpoint reads and publishes through.
type progressParams struct {
	addr     string
	workerID string
	allowed  protocol.AllowedCommands // the guard's list (ALLOWED_COMMANDS)
	state    *workerState
	pub      *publisher
	redact   *Redactor
	now      func() time.Time
}

func startProgressServer(pp progressParams) (*progressServer, error) {
	ln, err := net.Listen("tcp", pp.addr)
	if err != nil {
		return nil, fmt.Errorf("progress endpoint on %s: %w", pp.addr, err)
	}
	p := &progressServer{progressParams: pp, ln: ln, url: "http://" + ln.Addr().String() + "/progress"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /progress", p.progress)
	mux.HandleFunc("POST /guard", p.guard)
	mux.HandleFunc("GET /healthz", p.health)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *progressServer) close() { _ = p.srv.Close() }

type apiError struct {
	Code    protocol.Code `json:"code"`
	Message string        `json:"message"`
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v)
}

func (p *progressServer) progress(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, protocol.MaxProgressOutputBytes+8192))
	if err != nil {
		writeJSON(rw, http.StatusBadRequest, apiError{protocol.CodeInvalidTask, "read body: " + err.Error()})
		return
	}
	rep, err := protocol.DecodeProgressReport(body)
	if err != nil {
		p.refused(r.Header.Get(ProgressTokenHeader), body, err)
		writeJSON(rw, http.StatusBadRequest, apiError{protocol.CodeInvalidTask, err.Error()})
		return
	}
	n, err := p.report(r.Header.Get(ProgressTokenHeader), rep)
	switch {
	case errors.Is(err, errNoRun):
		writeJSON(rw, http.StatusConflict, apiError{protocol.CodeNotFound, err.Error()})
	case err != nil:
		writeJSON(rw, http.StatusInternalServerError, apiError{protocol.CodeInternalError, err.Error()})
	default:
		writeJSON(rw, http.StatusAccepted, map[string]any{"ok": true, "steps_completed": n})
	}
}

func (p *progressServer) health(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, http.StatusOK, p.healthReport())
}

func (p *progressServer) healthReport() map[string]any {
	s, out := p.state.snapshot(), p.pub.out
	h := map[string]any{"worker_id": p.workerID, "state": s.state, "tasks_completed": s.done,
		"events_pending": out.Len(), "events_dropped": out.Dropped()}
	if s.cur != nil {
		h["request_id"] = s.cur.task.RequestID
	}
	return h
}

// report records a progress report of the run that token belongs to: one
// more step on the run, and a Progress event on its output stream.
// Progress calls are the runtime's own channel: ALLOWED_COMMANDS does not
// govern them. A call that is refused is published as a warning of the
// running task, if any.
func (p *progressServer) report(token string, rep protocol.ProgressReport) (int, error) {
	w := p
	rep.Step, rep.Output = w.redact.Redact(rep.Step), w.redact.Redact(rep.Output)
	cur, own := w.state.owner(token)
	if !own {
		if cur != nil {
			w.pub.refusal(cur, protocol.RefusedToolProgress, rep.Step, errNoRun.Error(), "")
		}
		return 0, errNoRun
	}
	cur.mu.Lock()
	prevTotal := cur.run.StepsTotal
	if rep.StepsTotal > 0 {
		cur.run.StepsTotal = rep.StepsTotal
	}
	if err := cur.run.Step(rep.Step, w.now()); err != nil {
		cur.run.StepsTotal = prevTotal
		cur.mu.Unlock()
		w.pub.refusal(cur, protocol.RefusedToolProgress, rep.Step, err.Error(), "")
		return 0, errNoRun
	}
	n, total := cur.run.StepsCompleted, cur.run.StepsTotal
	cur.mu.Unlock()
	w.pub.run(cur)
	w.pub.event(cur, protocol.Progress{Step: rep.Step, ProgressPct: rep.ProgressPct, Output: rep.Output, StepsTotal: total})
	return n, nil
}

// refused publishes a progress call the endpoint could not take (a
// malformed report) as a warning of the run its token belongs to.
func (p *progressServer) refused(token string, body []byte, cause error) {
	if cur, own := p.state.owner(token); own {
		p.pub.refusal(cur, protocol.RefusedToolProgress, string(body), cause.Error(), "")
	}
}

var errNoRun = errors.New("no task is running, or the token belongs to another run")

func tokenEqual(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// ProgressCommand is `worker-wrapper progress`: it sends one progress
// report to the wrapper that runs the agent, from the agent's shell tool.
// It returns the process exit code: 0 accepted, 1 refused or failed, 2 bad
// usage.
func ProgressCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	code := progressCommand(args, getenv, stdout, stderr)
	if code == 2 {
		reportBadUsage(args, getenv)
	}
	return code
}

// reportBadUsage tells the wrapper about a progress call that went wrong
// before it could be sent, so that the consumer sees it (the wrapper
// refuses the document and publishes a warning). Best effort.
func reportBadUsage(args []string, getenv func(string) string) {
	url := getenv("WORKER_PROGRESS_URL")
	if url == "" {
		return
	}
	body, _ := json.Marshal(map[string]any{"bad_usage": args})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set(ProgressTokenHeader, getenv("WORKER_PROGRESS_TOKEN"))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

func progressCommand(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var rep protocol.ProgressReport
	for i := 0; i < len(args); i++ {
		flag := args[i]
		if i+1 >= len(args) {
			fmt.Fprintf(stderr, "worker-wrapper progress: %s needs a value\n", flag)
			return 2
		}
		val := args[i+1]
		i++
		switch flag {
		case "--step", "-s":
			rep.Step = val
		case "--pct", "-p":
			n, err := strconv.Atoi(val)
			if err != nil {
				fmt.Fprintf(stderr, "worker-wrapper progress: --pct %q: want a whole number from 0 to 100\n", val)
				return 2
			}
			rep.ProgressPct = &n
		case "--output", "-o":
			rep.Output = val
		case "--total", "-t":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > protocol.MaxStepsTotal {
				fmt.Fprintf(stderr, "worker-wrapper progress: --total %q: want a whole number from 1 to %d\n", val, protocol.MaxStepsTotal)
				return 2
			}
			rep.StepsTotal = n
		default:
			fmt.Fprintf(stderr, "worker-wrapper progress: unknown flag %s\nusage: worker-wrapper progress --step TEXT [--pct N] [--total N] [--output TEXT]\n", flag)
			return 2
		}
	}
	if rep.Step == "" {
		fmt.Fprintln(stderr, "usage: worker-wrapper progress --step TEXT [--pct N] [--total N] [--output TEXT]")
		return 2
	}
	url := getenv("WORKER_PROGRESS_URL")
	if url == "" {
		fmt.Fprintln(stderr, "worker-wrapper progress: WORKER_PROGRESS_URL is not set (run it from an agent the wrapper started)")
		return 1
	}
	body, _ := json.Marshal(rep)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ProgressTokenHeader, getenv("WORKER_PROGRESS_TOKEN"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "worker-wrapper progress: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8192))
	if resp.StatusCode != http.StatusAccepted {
		fmt.Fprintf(stderr, "worker-wrapper progress: refused (%s): %s", resp.Status, b)
		return 1
	}
	fmt.Fprintf(stdout, "progress recorded: %s", b)
	return 0
}
