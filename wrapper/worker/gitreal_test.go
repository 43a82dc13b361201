package worker

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/stubmodel"
)

// The real droid, in a sealed worker, on a git task: it runs in the
// task's worktree; its shell tool writes a file, commits it and pushes
// the task's branch itself, through the gateway that holds the
// credential; the wrapper then commits what is left and pushes again, and
// the output's git section names both commits (newest first),
// the branch as the server has it, the diffstat and the patch. The
// credential reaches neither the agent's tool output nor the patch.
func TestRealDroidGitTaskThroughTheGateway(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentDroid)
	srv, dir := sealGit(t, e)
	var err error
	if e.cfg.AllowedCommands, err = protocol.ParseAllowedCommandsEnv("*"); err != nil {
		t.Fatal(err)
	}
	// Droid's shield wants each commit and push in a call of its own,
	// with git -C and the repository's literal path: the task's worktree,
	// the remote's clone in the workspace.
	repo := filepath.Join(e.cfg.Workspace, "repo")
	steps := []stubmodel.Step{}
	for _, cmd := range []string{
		"printf 'by droid\\n' > droid.txt",
		"git -C " + repo + " add droid.txt",
		"git -C " + repo + " config user.name Droid",
		"git -C " + repo + " config user.email droid@shop.test",
		"git -C " + repo + " commit -q -m droid-commit",
		"git -C " + repo + " push -q origin HEAD",
		"printf 'left over\\n' > left.txt; echo PUSHED-MARKER",
	} {
		steps = append(steps, stubmodel.Step{ToolUse: shellTool(protocol.AgentDroid, cmd)})
	}
	stub.SetScript(stubmodel.Script{Steps: steps, Fallback: &stubmodel.Step{Text: finalText}})
	e.start(environ...)
	g := gitTask(t, e, "d1", "add droid.txt, commit and push it")
	if tool := requestCarrying(t, stub.Requests(), "PUSHED-MARKER"); strings.Contains(tool, "gw-secret-token") {
		t.Error("the credential reached the agent")
	}
	head := serverHas(t, srv, "refs/heads/agentvisor/d1")
	if g.Branch != "agentvisor/d1" || !g.Pushed || !g.Changed || !g.Uncommitted || g.HeadCommit != head || g.StartCommit != srv.Head ||
		len(g.Commits) != 2 || g.Commits[1].Subject != "droid-commit" || g.Commits[1].Author != "Droid <droid@shop.test>" ||
		g.Commits[0].Author != "Shop Bot <bot@shop.test>" || len(g.Files) != 2 || g.Insertions != 2 ||
		!strings.Contains(g.Patch, "+by droid") || !strings.Contains(g.Patch, "+left over") {
		t.Fatalf("git %+v (server's head %q)", g, head)
	}
	if strings.Contains(g.Patch, "gw-secret-token") {
		t.Error("the credential is in the patch")
	}
	st, err := gateway.NewClient(dir).Stats(context.Background())
	if err != nil || st[e.cfg.WorkerID].GitPushes != 2 || st[e.cfg.WorkerID].GitPushRefused != 0 {
		t.Errorf("gateway stats %+v %v: want the agent's push and the wrapper's", st[e.cfg.WorkerID], err)
	}
}

// An agent that takes its prompt over ACP (OpenCode here) opens its
// session in the task's worktree: a file it writes by a relative path
// is the task's change.
func TestRealACPAgentWorksInTheTasksWorktree(t *testing.T) {
	e, stub, environ := realAgentEnv(t, protocol.AgentOpenCode)
	srv, _ := sealGit(t, e)
	var err error
	if e.cfg.AllowedCommands, err = protocol.ParseAllowedCommandsEnv("*"); err != nil {
		t.Fatal(err)
	}
	stub.SetScript(stubmodel.Script{Steps: []stubmodel.Step{{ToolUse: shellTool(protocol.AgentOpenCode, "printf 'by opencode\\n' > opencode.txt; pwd")}},
		Fallback: &stubmodel.Step{Text: finalText}})
	e.start(environ...)
	g := gitTask(t, e, "o1", "add opencode.txt")
	if !g.Changed || !g.Pushed || len(g.Files) != 1 || g.Files[0].Path != "opencode.txt" || !strings.Contains(g.Patch, "+by opencode") {
		t.Fatalf("git %+v: want opencode.txt, written in the worktree, committed and pushed", g)
	}
	if head := serverHas(t, srv, "refs/heads/agentvisor/o1"); head != g.HeadCommit {
		t.Fatalf("server's head %q, output's %q", head, g.HeadCommit)
	}
}

// gitTask sends a task on the test's git remote to e's worker and
// returns the git section of its complete output.
func gitTask(t *testing.T, e *env, reqID, prompt string) *protocol.GitOutput {
	t.Helper()
	e.send(e.keys.Input(e.cfg.WorkerID), protocol.Task{RequestID: reqID, Prompt: prompt,
		Git: &protocol.Git{Remote: "https://git.example.test/repo.git", AuthorName: "Shop Bot", AuthorEmail: "bot@shop.test"}})
	o := e.outputOf(reqID, 120*time.Second)
	if o.Status != protocol.StatusComplete || o.Git == nil {
		t.Fatalf("output %+v (error %+v)", o, o.Error)
	}
	return o.Git
}
