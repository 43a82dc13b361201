package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/wrapper/internal/testbin"

	"github.com/agentvisor/agentvisor/protocol"
)

var fakeAgent, fakeACP string

func TestMain(m *testing.M) {
	var dir string
	testbin.Main(func() int {
		fakeAgent, fakeACP = filepath.Join(dir, "fakeagent"), filepath.Join(dir, "fakeacp")
		return m.Run()
	}, map[string]string{"fakeagent": testbin.FakeAgent, "fakeacp": testbin.FakeACP}, &dir)
}

func fakeSpec(droid bool, prompt string) Spec {
	argv := []string{fakeAgent, "-p", prompt, "--output-format", "stream-json", "--verbose"}
	var p Parser = ClaudeParser{}
	if droid {
		argv = []string{fakeAgent, "exec", "-o", "stream-json", prompt}
		p = DroidParser{}
	}
	return Spec{Argv: argv, Env: os.Environ(), Parser: p, Timeout: 20 * time.Second,
		ResultGrace: 300 * time.Millisecond, DrainGrace: 300 * time.Millisecond, KillGrace: 300 * time.Millisecond}
}

func TestRunFakeAgentCases(t *testing.T) {
	tests := []struct {
		name    string
		prompt  string
		status  protocol.OutputStatus
		code    protocol.Code
		rule    string
		check   func(t *testing.T, o Outcome, v Verdict)
		timeout time.Duration
		schema  bool
	}{
		{name: "complete", prompt: "fake:complete", status: protocol.StatusComplete, rule: "stop-json"},
		{name: "blocked", prompt: "fake:blocked", status: protocol.StatusBlocked, rule: "stop-json",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if v.Question != "Which branch?" {
					t.Errorf("question %q", v.Question)
				}
			}},
		{name: "stop output failed", prompt: "fake:failed", status: protocol.StatusFailed, code: protocol.CodeTaskFailed, rule: "stop-json"},
		{name: "no stop output", prompt: "fake:no-stop", status: protocol.StatusFailed, code: protocol.CodeNoStopOutput, rule: "no-stop-output",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if !strings.Contains(v.Response, "I did it") {
					t.Errorf("response %q lost the agent's text", v.Response)
				}
			}},
		{name: "crash after init", prompt: "fake:crash-after-init", status: protocol.StatusFailed, code: protocol.CodeAgentCrashed, rule: "no-result",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if o.Exit.Code != 3 || !strings.Contains(v.Error.Message, "after its init line") || !strings.Contains(v.Error.Message, "something broke") {
					t.Errorf("exit %v, message %q", o.Exit, v.Error.Message)
				}
			}},
		{name: "crash before init", prompt: "fake:crash-before-init", status: protocol.StatusFailed, code: protocol.CodeAgentCrashed, rule: "no-result",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if !strings.Contains(v.Error.Message, "before its init line") || !strings.Contains(v.Error.Message, "could not load configuration") {
					t.Errorf("message %q", v.Error.Message)
				}
			}},
		{name: "exit 0 without a result", prompt: "fake:no-result", status: protocol.StatusFailed, code: protocol.CodeAgentCrashed, rule: "no-result"},
		{name: "exit 1 after success", prompt: "fake:exit1-after-success", status: protocol.StatusComplete, rule: "stop-json",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if o.Exit.Code != 1 {
					t.Errorf("exit %v", o.Exit)
				}
			}},
		{name: "is_error with exit 0", prompt: "fake:is-error", status: protocol.StatusFailed, code: protocol.CodeAgentError, rule: "result-error",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if o.Exit.Code != 0 || !strings.Contains(v.Error.Message, "API status 500") {
					t.Errorf("exit %v message %q", o.Exit, v.Error.Message)
				}
			}},
		{name: "hangs after its result", prompt: "fake:hang-after-result", status: protocol.StatusComplete, rule: "stop-json",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if !o.KilledAfterResult || !o.Exit.Signaled {
					t.Errorf("killed after result %v, exit %v", o.KilledAfterResult, o.Exit)
				}
			}},
		{name: "a child holds stdout", prompt: "fake:child-holds-stdout", status: protocol.StatusComplete, rule: "stop-json",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if !o.KilledDraining || o.Duration > 5*time.Second {
					t.Errorf("draining kill %v after %v", o.KilledDraining, o.Duration)
				}
			}},
		{name: "a 50 MB line", prompt: "fake:big-line", status: protocol.StatusComplete, rule: "stop-json"},
		{name: "garbage lines", prompt: "fake:garbage", status: protocol.StatusComplete, rule: "stop-json"},
		{name: "ignores SIGTERM past its timeout", prompt: "fake:ignore-sigterm", status: protocol.StatusFailed, code: protocol.CodeAgentTimeout, rule: "timeout",
			timeout: 500 * time.Millisecond,
			check: func(t *testing.T, o Outcome, v Verdict) {
				if !o.Exit.Signaled || o.Exit.Signal != syscall.SIGKILL {
					t.Errorf("exit %v, want SIGKILL", o.Exit)
				}
			}},
		{name: "api retries", prompt: "fake:api-retry", status: protocol.StatusComplete, rule: "stop-json",
			check: func(t *testing.T, o Outcome, v Verdict) {
				if o.Retries != 2 {
					t.Errorf("retries %d", o.Retries)
				}
			}},
		{name: "structured output", prompt: "fake:schema", status: protocol.StatusComplete, rule: "structured-output", schema: true},
		{name: "schema given, no structured output", prompt: "fake:schema fake:no-stop", status: protocol.StatusFailed, code: protocol.CodeNoStopOutput, schema: true, rule: "no-stop-output"},
	}
	for _, tt := range tests {
		for _, droid := range []bool{false, true} {
			if droid && (tt.schema || strings.Contains(tt.name, "api retries")) {
				continue // Claude-only features
			}
			name := tt.name + "/claude"
			if droid {
				name = tt.name + "/droid"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				spec := fakeSpec(droid, tt.prompt)
				if tt.timeout > 0 {
					spec.Timeout = tt.timeout
				}
				o := Run(context.Background(), spec)
				v := Judge(o, tt.schema)
				if v.Status != tt.status || v.Rule != tt.rule {
					t.Fatalf("verdict %s by rule %s, want %s by %s: %+v\noutcome %+v", v.Status, v.Rule, tt.status, tt.rule, v.Error, o)
				}
				if tt.code != "" && (v.Error == nil || v.Error.Code != tt.code) {
					t.Fatalf("error %+v, want code %s", v.Error, tt.code)
				}
				if tt.code == "" && v.Error != nil {
					t.Fatalf("unexpected error %+v", v.Error)
				}
				if tt.check != nil {
					tt.check(t, o, v)
				}
			})
		}
	}
}

func TestRunMissingAndUnexecutableAgent(t *testing.T) {
	o := Run(context.Background(), Spec{Argv: []string{"/nonexistent/claude"}, Parser: ClaudeParser{}})
	if o.StartErr == nil || o.Exit.Code != 127 {
		t.Fatalf("missing: %+v", o)
	}
	if v := Judge(o, false); v.Error.Code != protocol.CodeAgentCrashed || !strings.Contains(v.Error.Message, "exit 127") {
		t.Fatalf("missing verdict %+v", v.Error)
	}
	notExec := filepath.Join(t.TempDir(), "claude")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	o = Run(context.Background(), Spec{Argv: []string{notExec}, Parser: ClaudeParser{}})
	if o.StartErr == nil || o.Exit.Code != 126 {
		t.Fatalf("not executable: %+v", o)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	spec := fakeSpec(false, "fake:sleep-10000")
	spec.OnStart = func(int) { time.AfterFunc(100*time.Millisecond, cancel) }
	o := Run(ctx, spec)
	if !o.Cancelled || o.Duration > 3*time.Second {
		t.Fatalf("cancelled %v after %v", o.Cancelled, o.Duration)
	}
	if v := Judge(o, false); v.Error == nil || v.Error.Code != protocol.CodeTerminated {
		t.Fatalf("verdict %+v", v)
	}
}

func TestRunPTY(t *testing.T) {
	for _, droid := range []bool{false, true} {
		spec := fakeSpec(droid, "fake:garbage")
		spec.PTY = true
		o := Run(context.Background(), spec)
		v := Judge(o, false)
		if v.Status != protocol.StatusComplete || o.Init == nil {
			t.Fatalf("droid=%v: verdict %+v, outcome %+v", droid, v, o)
		}
		if !strings.Contains(o.Stderr, "this is not JSON") {
			t.Errorf("pty non-JSON lines not kept as stderr: %q", o.Stderr)
		}
	}
}

func TestRunEventsInOrder(t *testing.T) {
	var kinds []string
	spec := fakeSpec(false, "fake:api-retry")
	spec.OnEvent = func(ev Event) {
		switch {
		case ev.Init != nil:
			kinds = append(kinds, "init")
		case ev.Retry != nil:
			kinds = append(kinds, "retry")
		case ev.Turn != nil:
			kinds = append(kinds, "turn")
		case ev.Result != nil:
			kinds = append(kinds, "result")
		}
	}
	Run(context.Background(), spec)
	if got := strings.Join(kinds, ","); got != "init,retry,retry,turn,result" {
		t.Fatalf("events %s", got)
	}
}
