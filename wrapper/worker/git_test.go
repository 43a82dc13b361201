package worker

import (
	"context"
	"crypto/tls"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/gateway/gatewaytest"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
)

func serverHas(t *testing.T, srv *testkit.GitServer, ref string) string {
	t.Helper()
	out, _ := exec.Command("git", "--git-dir", srv.Repo, "rev-parse", "-q", "--verify", ref).Output()
	return strings.TrimSpace(string(out))
}

// A task that names a repository: the agent runs in a worktree on the
// task's branch; what it leaves is committed and pushed, and the output
// says what; a follow-up with the same task_id continues the branch; a
// task that changes nothing says so; a failed task's work is kept on the
// branch; a remote that is not there fails the task before the agent runs.
func TestGitTaskBranchIsPushedAndContinued(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	e.start()
	in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)
	git := &protocol.Git{Remote: srv.RepoURL(), AuthorName: "Shop Bot", AuthorEmail: "bot@shop.test"}

	e.send(in, protocol.Task{RequestID: "r1", TaskID: "issue-7", Prompt: "fake:edit add a file", Git: git})
	o := e.waitOutputs(out, 1, 20*time.Second)[0]
	g := o.Git
	if o.Status != protocol.StatusComplete || g == nil {
		t.Fatalf("output %+v", o)
	}
	head := serverHas(t, srv, "refs/heads/agentvisor/issue-7")
	if g.Branch != "agentvisor/issue-7" || !g.Changed || !g.Pushed || !g.Uncommitted || g.HeadCommit != head ||
		g.StartCommit != srv.Head || g.BaseCommit != srv.Head || g.Base != "main" || len(g.Commits) != 1 ||
		g.Commits[0].Subject != "fake:edit add a file" || g.Commits[0].Author != "Shop Bot <bot@shop.test>" ||
		len(g.Files) != 1 || !strings.HasPrefix(g.Files[0].Path, "edit-") || g.Insertions != 1 ||
		!strings.Contains(g.Patch, "+fake:edit add a file") {
		t.Fatalf("git %+v (server's head %q)", g, head)
	}
	body, _ := exec.Command("git", "--git-dir", srv.Repo, "log", "-1", "--format=%B", head).Output()
	if !strings.Contains(string(body), "Agentvisor-Request-Id: r1") {
		t.Errorf("commit message %q", body)
	}
	_, prog := e.docs(out)
	if len(prog) == 0 || prog[0].Step != "git: working on branch agentvisor/issue-7 of "+srv.RepoURL() {
		t.Errorf("progress %+v", prog)
	}

	// The follow-up: the same task_id, the agent commits on its own.
	e.send(in, protocol.Task{RequestID: "r2", TaskID: "issue-7", Prompt: "fake:commit the review's fix", Git: git})
	o = e.waitOutputs(out, 2, 20*time.Second)[1]
	g = o.Git
	if o.Status != protocol.StatusComplete || g == nil || g.StartCommit != head || g.Uncommitted || !g.Pushed ||
		len(g.Commits) != 1 || g.Commits[0].Subject != "the agent's commit" || g.HeadCommit != serverHas(t, srv, "refs/heads/agentvisor/issue-7") {
		t.Fatalf("follow-up %+v git %+v", o, g)
	}
	if files, _ := exec.Command("git", "--git-dir", srv.Repo, "ls-tree", "--name-only", g.HeadCommit).Output(); strings.Count(string(files), "edit-") != 2 {
		t.Errorf("the branch's tree: %s", files)
	}

	// Nothing changed: said so, nothing pushed.
	e.send(in, protocol.Task{RequestID: "r3", TaskID: "issue-8", Prompt: "look only", Git: git})
	o = e.waitOutputs(out, 3, 20*time.Second)[2]
	if o.Status != protocol.StatusComplete || o.Git == nil || o.Git.Changed || o.Git.Pushed || o.Git.HeadCommit != srv.Head {
		t.Fatalf("unchanged %+v git %+v", o, o.Git)
	}
	if serverHas(t, srv, "refs/heads/agentvisor/issue-8") != "" {
		t.Error("an unchanged branch was pushed")
	}

	// A failed task keeps its work on its branch and says where.
	e.send(in, protocol.Task{RequestID: "r4", Prompt: "fake:edit fake:failed half done", Git: git})
	o = e.waitOutputs(out, 4, 20*time.Second)[3]
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeTaskFailed || o.Git == nil || !o.Git.Pushed ||
		o.Git.Branch != "agentvisor/r4" || serverHas(t, srv, "refs/heads/agentvisor/r4") != o.Git.HeadCommit {
		t.Fatalf("failed %+v git %+v", o, o.Git)
	}

	// A remote that is not there: GIT_WORKTREE_FAILED, the agent never ran.
	e.send(in, protocol.Task{RequestID: "r5", Prompt: "fake:edit", Git: &protocol.Git{Remote: srv.URL + "/nope.git"}})
	o = e.waitOutputs(out, 5, 20*time.Second)[4]
	if o.Status != protocol.StatusFailed || o.Error.Code != protocol.CodeGitWorktree || o.Git != nil || o.SessionID != "" {
		t.Fatalf("no remote %+v", o)
	}
	if got := serverHas(t, srv, "refs/heads/main"); got != srv.Head {
		t.Errorf("main moved to %s", got)
	}
}

// A sealed worker: git reaches the remote through the gateway, which adds
// the credential the agent never sees and lets the worker push to its
// task's branch only. The wrapper's push passes; the agent's own push to
// another branch is refused, and the refusal is a warning of the task.
func TestGitTaskThroughTheGateway(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	srv, dir := sealGit(t, e)
	e.start()
	in, out := e.keys.Input(e.cfg.WorkerID), e.keys.Output(e.cfg.WorkerID)

	e.send(in, protocol.Task{RequestID: "g1", Prompt: "fake:edit fake:push-other sealed work",
		Git: &protocol.Git{Remote: "https://git.example.test/repo.git"}})
	o := e.waitOutputs(out, 1, 30*time.Second)[0]
	if o.Status != protocol.StatusComplete || o.Git == nil || !o.Git.Pushed || o.Git.HeadCommit != serverHas(t, srv, "refs/heads/agentvisor/g1") {
		t.Fatalf("output %+v git %+v", o, o.Git)
	}
	if got := serverHas(t, srv, "refs/heads/not-my-branch"); got != "" {
		t.Fatalf("the agent pushed to another branch: %s", got)
	}
	_, prog := e.docs(out)
	refused := false
	for _, p := range prog {
		if p.Level == protocol.LevelWarning && p.Refused != nil && p.Refused.Tool == "network" &&
			strings.Contains(p.Refused.Reason, "push to refs/heads/not-my-branch: not the task's branch refs/heads/agentvisor/g1") {
			refused = true
		}
	}
	if !refused {
		t.Errorf("no warning for the refused push: %+v", prog)
	}
	// The gateway saw the two pushes: the wrapper's passed, the agent's refused.
	st, err := gateway.NewClient(dir).Stats(context.Background())
	if err != nil || st[e.cfg.WorkerID].GitPushes != 1 || st[e.cfg.WorkerID].GitPushRefused != 1 {
		t.Errorf("gateway stats %+v %v", st[e.cfg.WorkerID], err)
	}
	if strings.Contains(o.Git.Patch, "gw-secret-token") {
		t.Error("the credential is in the patch")
	}
}

// sealGit serves a git server over HTTPS, with a credential, behind a
// real gateway (git.example.test), and makes e's worker a sealed one of
// it: its egress goes to the gateway, which adds the credential and
// guards its pushes. It returns the server and the gateway's directory.
func sealGit(t *testing.T, e *env) (*testkit.GitServer, string) {
	t.Helper()
	srv := testkit.StartGitServer(t, "git", "gw-secret-token")
	dir := gatewaytest.Dir(t)
	gatewaytest.Start(t, gateway.Config{Dir: dir, Redis: "127.0.0.1:1",
		Credentials: []gateway.Credential{{Host: "git.example.test", Username: "git", Password: "gw-secret-token"}},
		UpstreamTLS: &tls.Config{RootCAs: srv.Roots, ServerName: "example.com"},
		Resolver:    func(context.Context, string) ([]string, error) { return []string{"192.0.2.1"}, nil },
		DialEgress: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, srv.Listener.Addr().String())
		},
	})
	const token = "the-workers-token"
	if _, err := gateway.NewClient(dir).OpenSpec(context.Background(), gateway.WorkerSpec{WorkerID: e.cfg.WorkerID,
		Allow: []string{"git.example.test"}, ModelToken: token}); err != nil {
		t.Fatal(err)
	}
	e.cfg.EgressSocket = filepath.Join(dir, e.cfg.WorkerID, gateway.EgressSocket)
	e.cfg.ModelSocketToken, e.cfg.CredentialHosts = token, []string{"git.example.test"}
	return srv, dir
}
