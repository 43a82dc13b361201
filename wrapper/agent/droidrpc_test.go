package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

var capture = flag.Bool("capture", false, "rewrite testdata/captured from the real CLIs")

const droidCaptured = "testdata/captured/droid-0.225.2-jsonrpc.stream.jsonl"

// recorder is a Parser that keeps every line it parses.
type recorder struct {
	Parser
	mu    sync.Mutex
	lines bytes.Buffer
}

func (r *recorder) ParseLine(line []byte) []Event {
	r.mu.Lock()
	r.lines.Write(line)
	r.lines.WriteByte('\n')
	r.mu.Unlock()
	return r.Parser.ParseLine(line)
}

// droidAgainstStub returns the real droid, configured (HOME's settings)
// for a custom model at a stub model server, and the environment to run
// it in.
func droidAgainstStub(t *testing.T, script stubmodel.Script) (string, *stubmodel.Server, []string) {
	t.Helper()
	bin, err := exec.LookPath("droid")
	if err != nil {
		t.Fatalf("the real droid CLI is not installed (run `make setup`): %v", err)
	}
	stub, err := stubmodel.Start(script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stub.Close() })
	home := t.TempDir()
	settings, _ := json.Marshal(map[string]any{"customModels": []map[string]any{{"model": "m", "displayName": "stub",
		"baseUrl": stub.URL, "apiKey": "x", "provider": "anthropic", "maxOutputTokens": 4096}}})
	if err := os.MkdirAll(filepath.Join(home, ".factory"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".factory", "settings.json"), settings, 0o600); err != nil {
		t.Fatal(err)
	}
	return bin, stub, []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
}

// The real droid in its JSON-RPC mode, through Persistent: a session
// opened, a task with a tool call, a steering message that reaches the
// running turn, a 401 of the model API ending a turn, an interrupt that
// ends a turn and leaves the process serving; then a second process loads
// the session from its files, and a session it does not have is refused.
// With -capture it rewrites the captured transcript that
// TestDroidRPCParser reads.
func TestPersistentRealDroid(t *testing.T) {
	bin, stub, env := droidAgainstStub(t, stubmodel.Script{Steps: []stubmodel.Step{
		{ToolUse: &stubmodel.ToolUse{Name: "Execute", Input: map[string]any{"command": "sleep 1; echo slept", "riskLevel": "low", "riskLevelReason": "waits"}}},
		{Text: "Done.\n{\"status\": \"complete\", \"result\": {\"n\": 1}}"},
		{Error: &stubmodel.HTTPError{Status: 401, Message: "bad key"}},
		{Text: "late", DelayMS: 60_000},
	}, Fallback: &stubmodel.Step{Text: "Done.\n{\"status\": \"complete\", \"result\": {}}"}})
	ws := t.TempDir()
	session := DroidSession{Cwd: ws, ModelID: "custom:m", SkipPermissions: true}
	argv := []string{bin, "exec", "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc", "--cwd", ws, "--skip-permissions-unsafe", "-m", "custom:m"}
	start := func(resumeID string) (*Persistent, *recorder) {
		d := NewDroidRPC(session, resumeID)
		rec := &recorder{Parser: d}
		p, err := StartPersistent(Spec{Argv: argv, Env: env, Dir: ws, Parser: rec, Dialect: d, KillGrace: time.Second, InterruptGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if err := p.Open(time.Minute); err != nil {
			t.Fatal(err)
		}
		return p, rec
	}
	p, rec := start("")
	ctx := context.Background()

	var tools []string
	steered := false
	o := p.Send(ctx, p.Message("FIRST task"), time.Minute, func(ev Event) {
		if ev.ToolCall != nil {
			tools = append(tools, ev.ToolCall.Name)
			if !steered {
				steered = true
				if err := p.Inject("STEER-MARKER"); err != nil {
					t.Error(err)
				}
			}
		}
	})
	if o.Result == nil || o.Result.IsError || o.Init == nil || o.Result.SessionID != o.Init.SessionID || o.Result.Turns != 2 {
		t.Fatalf("first task: %+v result %+v init %+v", o, o.Result, o.Init)
	}
	if v := Judge(o, false); v.Status != protocol.StatusComplete || string(v.Result) != `{"n": 1}` {
		t.Fatalf("verdict %+v", v)
	}
	if len(tools) != 1 || tools[0] != "Execute" {
		t.Errorf("tool calls %v", tools)
	}
	reqs := stub.Requests()
	if len(reqs) != 2 || !strings.Contains(reqs[1].Text(), "STEER-MARKER") {
		t.Fatalf("the steering message did not reach the turn's second call (%d requests)", len(reqs))
	}
	sid := o.Init.SessionID

	o = p.Send(ctx, p.Message("second"), time.Minute, nil)
	if o.Result == nil || !o.Result.IsError || o.Result.APIErrorStatus != 401 || o.Result.Subtype != "model_authentication_failed" || !p.Alive() {
		t.Fatalf("a 401: %+v result %+v", o, o.Result)
	}

	interrupt := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(interrupt) })
	t0 := time.Now()
	o = p.SendInterruptible(ctx, p.Message("third"), time.Minute, interrupt, nil)
	if !o.Interrupted || o.Result == nil || o.Result.Subtype != "cancelled" || !p.Alive() || time.Since(t0) > 5*time.Second {
		t.Fatalf("interrupted after %v: %+v result %+v, alive %v", time.Since(t0), o, o.Result, p.Alive())
	}
	o = p.Send(ctx, p.Message("FOURTH after the interrupt"), time.Minute, nil)
	if o.Result == nil || o.Result.IsError {
		t.Fatalf("after the interrupt: %+v", o.Result)
	}
	p.Close()
	if *capture {
		if err := os.WriteFile(droidCaptured, rec.lines.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A new process loads the session from its files (killed, the first
	// left them as they were).
	p2, _ := start(sid)
	o = p2.Send(ctx, p2.Message("FIFTH in a new process"), time.Minute, nil)
	if o.Result == nil || o.Result.IsError || o.Result.SessionID != sid {
		t.Fatalf("resumed: %+v", o.Result)
	}
	reqs = stub.Requests()
	if last := reqs[len(reqs)-1].Text(); !strings.Contains(last, "FIRST task") || !strings.Contains(last, "FOURTH") {
		t.Fatalf("the loaded session lacks the earlier turns: %q", last)
	}

	d := NewDroidRPC(session, "00000000-0000-0000-0000-000000000000")
	p3, err := StartPersistent(Spec{Argv: argv, Env: env, Dir: ws, Parser: d, Dialect: d, KillGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	if err := p3.Open(time.Minute); err == nil || !strings.Contains(err.Error(), ErrSessionNotFound.Error()) {
		t.Fatalf("loading an unknown session: %v, want ErrSessionNotFound", err)
	}
}

// The captured transcript (TestPersistentRealDroid -capture) through the
// parser: the session, the echoes of the messages, the tool call, each
// turn's result with its usage.
func TestDroidRPCParser(t *testing.T) {
	data, err := os.ReadFile(droidCaptured)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDroidRPC(DroidSession{}, "")
	var (
		results []*Result
		init    *Init
		replays int
		tools   []string
		open    *ControlResponse
	)
	for _, line := range bytes.Split(data, []byte("\n")) {
		for _, ev := range d.ParseLine(line) {
			switch {
			case ev.Init != nil:
				init = ev.Init
			case ev.Control != nil:
				open = ev.Control
			case ev.Replay:
				replays++
			case ev.ToolCall != nil:
				tools = append(tools, ev.ToolCall.Name)
			case ev.Result != nil:
				results = append(results, ev.Result)
			}
		}
	}
	if init == nil || init.SessionID == "" || init.Model != "custom:m" || open == nil || open.Subtype != "success" {
		t.Fatalf("init %+v, open %+v", init, open)
	}
	if replays != 5 || len(tools) != 1 || tools[0] != "Execute" {
		t.Errorf("replays %d (want 4 tasks and a steering message), tools %v", replays, tools)
	}
	if len(results) != 4 {
		t.Fatalf("%d results, want one per turn", len(results))
	}
	want := []struct {
		subtype string
		isError bool
		status  int
		turns   int
		input   int64
	}{
		{"completed", false, 0, 2, 2 * stubmodel.DefaultUsage.InputTokens},
		{"model_authentication_failed", true, 401, 0, 0},
		{"cancelled", true, 0, 0, 0},
		{"completed", false, 0, 1, stubmodel.DefaultUsage.InputTokens},
	}
	for i, w := range want {
		r := results[i]
		if r.Subtype != w.subtype || r.IsError != w.isError || r.APIErrorStatus != w.status || r.Turns != w.turns ||
			r.Usage.Input != w.input || r.SessionID != init.SessionID {
			t.Errorf("result %d: %+v, want %+v", i, r, w)
		}
	}
	if !strings.Contains(results[0].Text, `"status": "complete"`) || !strings.Contains(results[1].Text, "401") {
		t.Errorf("texts %q / %q", results[0].Text, results[1].Text)
	}
}
