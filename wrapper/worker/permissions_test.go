package worker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// commandBin writes an executable that records each run of it in
// dir/<name>.ran, and returns its directory.
func commandBin(t *testing.T, names ...string) (binDir, ranDir string) {
	t.Helper()
	binDir, ranDir = t.TempDir(), t.TempDir()
	for _, n := range names {
		script := "#!/bin/sh\necho \"$@\" >> " + shellQuote(filepath.Join(ranDir, n+".ran")) + "\necho " + n + " done\n"
		if err := os.WriteFile(filepath.Join(binDir, n), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return binDir, ranDir
}

// ALLOWED_COMMANDS, enforced by the real CLIs: with engineering.deploy
// allowed, the agent's `engineering deploy` runs, its progress call runs
// (worker.progress is not in the list: it is always allowed), and
// `rogue --now`, a compound command smuggling rogue behind the allowed one,
// and a command substitution are refused; each refusal reaches the
// consumer as a warning.
func TestAllowedCommandsEnforcedByRealAgents(t *testing.T) {
	eachRealAgent(t, enforcesAllowedCommands)
}

// The same with a persistent Codex, `codex app-server`, which runs no
// hook: its approval requests are answered by the list.
func TestAllowedCommandsEnforcedByPersistentCodex(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentCodex)
	e.cfg.Persistent = true
	enforcesAllowedCommands(t, protocol.AgentCodex, e, stub, environ)
	e.ranInAppServer()
}

// enforcesAllowedCommands runs the task of TestAllowedCommandsEnforcedByRealAgents
// in a worker of agentType (not started yet).
func enforcesAllowedCommands(t *testing.T, agentType protocol.AgentType, e *env, stub *stubmodel.Server, environ []string) {
	e.cfg.AllowedCommands, _ = protocol.ParseAllowedCommands([]string{"engineering.deploy"})
	binDir, ranDir := commandBin(t, "engineering", "rogue")
	environ = append(environ, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	e.start(environ...)
	in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)

	refused := []string{"rogue --now", "engineering deploy --env prod; rogue --chained", "engineering deploy $(rogue --subst)"}
	steps := []stubmodel.Step{
		{ToolUse: shellTool(agentType, `worker-wrapper progress --step "Deploying" --pct 50`)},
		{ToolUse: shellTool(agentType, "engineering deploy --env prod")},
	}
	for _, c := range refused {
		steps = append(steps, stubmodel.Step{ToolUse: shellTool(agentType, c)})
	}
	written := filepath.Join(e.cfg.Workspace, "notes.md")
	if agentType == protocol.AgentClaude { // editing files stays allowed
		steps = append(steps, stubmodel.Step{ToolUse: &stubmodel.ToolUse{Name: "Write",
			Input: map[string]any{"file_path": written, "content": "deployed\n"}}})
	}
	steps = append(steps, stubmodel.Step{Text: "Deployed.\n{\"status\": \"complete\", \"result\": {\"deployed\": true}}"})
	stub.SetScript(stubmodel.Script{Steps: steps})
	e.send(in, protocol.Task{RequestID: "deploy", Prompt: "Deploy to prod."})
	o := e.waitOutputs(out, 1, 90*time.Second)[0]
	if o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	if b, err := os.ReadFile(filepath.Join(ranDir, "engineering.ran")); err != nil || string(b) != "deploy --env prod\n" {
		t.Errorf("the allowed command ran as %q (%v), want once with deploy --env prod", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(ranDir, "rogue.ran")); err == nil {
		t.Errorf("a refused command ran: %q", b)
	}
	if b, err := os.ReadFile(written); agentType == protocol.AgentClaude && string(b) != "deployed\n" {
		t.Errorf("Claude's Write tool wrote %q (%v)", b, err)
	}
	_, prog := e.docs(out)
	var steps2, refusedCmds []string
	for _, p := range prog {
		steps2 = append(steps2, p.Step)
		if p.Refused != nil {
			if p.Level != protocol.LevelWarning {
				t.Errorf("refusal at level %q", p.Level)
			}
			refusedCmds = append(refusedCmds, p.Refused.Command)
		}
	}
	if !slices.Contains(steps2, "Deploying") {
		t.Errorf("the progress call did not come through: %q", steps2)
	}
	slices.Sort(refusedCmds)
	want := slices.Clone(refused)
	slices.Sort(want)
	if !slices.Equal(refusedCmds, want) {
		t.Errorf("refusal warnings for %q, want %q", refusedCmds, want)
	}
}

// A progress call that goes wrong (no step, a percentage that is not a
// number, one out of range) is refused, and the consumer sees each as a
// warning of the task; a good one still counts.
func TestRefusedProgressCallsAreWarnings(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentClaude)
	e.start(environ...)
	in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
	bad := []string{`worker-wrapper progress --pct 50`, `worker-wrapper progress --step "Tests" --pct abc`, `worker-wrapper progress --step "Tests" --pct 400`}
	var steps []stubmodel.Step
	for _, c := range bad {
		steps = append(steps, stubmodel.Step{ToolUse: shellTool(protocol.AgentClaude, c)})
	}
	steps = append(steps, stubmodel.Step{ToolUse: shellTool(protocol.AgentClaude, `worker-wrapper progress --step "Tests" --pct 60`)},
		stubmodel.Step{Text: "{\"status\": \"complete\", \"result\": {}}"})
	stub.SetScript(stubmodel.Script{Steps: steps})
	e.send(in, protocol.Task{RequestID: "bad-progress", Prompt: "Report."})
	if o := e.waitOutputs(out, 1, 60*time.Second)[0]; o.Status != protocol.StatusComplete {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	_, prog := e.docs(out)
	var warnings, good int
	for _, p := range prog {
		switch {
		case p.Refused != nil && p.Refused.Tool == "progress" && p.Level == protocol.LevelWarning && p.Refused.Reason != "":
			warnings++
		case p.Step == "Tests" && p.Refused == nil:
			good++
		default:
			t.Errorf("unexpected progress event %+v", p)
		}
	}
	if warnings != len(bad) || good != 1 {
		t.Errorf("%d refusal warnings and %d good steps, want %d and 1: %+v", warnings, good, len(bad), prog)
	}
}

// The guard fails closed: whatever keeps it from the wrapper's answer
// refuses the command (exit 2, the reason on stderr for the model).
func TestGuardFailsClosed(t *testing.T) {
	hook := `{"tool_name":"Execute","tool_input":{"command":"ls"}}`
	tests := []struct {
		name, stdin string
		env         map[string]string
	}{
		{"no endpoint", hook, nil},
		{"endpoint down", hook, map[string]string{"WORKER_PROGRESS_URL": "http://127.0.0.1:1/progress", "WORKER_PROGRESS_TOKEN": "t"}},
		{"not json", "ls", map[string]string{"WORKER_PROGRESS_URL": "http://127.0.0.1:1/progress"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errb strings.Builder
			if code := GuardCommand(strings.NewReader(tt.stdin), mapEnv(tt.env), &errb); code != 2 || !strings.Contains(errb.String(), "refused by agentvisor") {
				t.Errorf("exit %d, stderr %q", code, errb.String())
			}
		})
	}
}
