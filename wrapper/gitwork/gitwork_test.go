package gitwork

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/testkit"
	"github.com/agentvisor/agentvisor/wrapper/reaper"
)

// env is git's environment in these tests: a HOME of its own, no system
// configuration.
func gitEnv(t *testing.T) []string {
	return []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1"}
}

func serverRef(t *testing.T, srv *testkit.GitServer, ref string) string {
	t.Helper()
	out, _ := exec.Command("git", "--git-dir", srv.Repo, "rev-parse", "-q", "--verify", ref).Output()
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A task's worktree is a clone on its branch; what the agent leaves
// uncommitted is committed with the task's author and the agent's
// summary, pushed, and described: commits, diffstat, patch.
func TestUncommittedWorkIsCommittedAndPushed(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	ws := t.TempDir()
	g := protocol.Git{Remote: srv.RepoURL(), Branch: "agentvisor/t-1", AuthorName: "Shop Bot", AuthorEmail: "bot@shop.test", Message: "Add the greeting"}
	w, err := Prepare(context.Background(), Params{Workspace: ws, Env: gitEnv(t)}, g)
	if err != nil {
		t.Fatal(err)
	}
	if w.Dir != filepath.Join(ws, "repo") {
		t.Errorf("worktree %s", w.Dir)
	}
	if b := testkit.Git(t, w.Dir, nil, "rev-parse", "--abbrev-ref", "HEAD"); b != g.Branch {
		t.Fatalf("on branch %s, want %s", b, g.Branch)
	}
	write(t, w.Dir, "README", "hello through the gateway\nand more\n")
	write(t, w.Dir, "greeting.txt", "hi\n")
	out, err := w.Finish(context.Background(), FinishArgs{Summary: "I added a greeting.", RequestID: "r-1"})
	if err != nil {
		t.Fatal(err)
	}
	head := serverRef(t, srv, "refs/heads/"+g.Branch)
	if !out.Changed || !out.Pushed || !out.Uncommitted || out.HeadCommit != head || out.StartCommit != srv.Head ||
		out.BaseCommit != srv.Head || out.Base != "main" || out.Branch != g.Branch || out.Remote != g.Remote {
		t.Fatalf("output %+v (server's head %s)", out, head)
	}
	if len(out.Commits) != 1 || out.Commits[0].SHA != head || out.Commits[0].Subject != "Add the greeting" || out.Commits[0].Author != "Shop Bot <bot@shop.test>" {
		t.Errorf("commits %+v", out.Commits)
	}
	if out.Insertions != 2 || out.Deletions != 0 || len(out.Files) != 2 || out.Files[0].Path != "README" || out.Files[1].Path != "greeting.txt" {
		t.Errorf("diffstat +%d -%d %+v", out.Insertions, out.Deletions, out.Files)
	}
	if !strings.Contains(out.Patch, "+and more") || !strings.Contains(out.Patch, "+++ b/greeting.txt") || out.PatchTruncated || out.PatchBytes != len(out.Patch) {
		t.Errorf("patch (%d bytes, truncated %v):\n%s", out.PatchBytes, out.PatchTruncated, out.Patch)
	}
	msg := testkit.Git(t, srv.Repo, nil, "log", "-1", "--format=%B", head)
	if !strings.Contains(msg, "I added a greeting.") || !strings.Contains(msg, "Agentvisor-Request-Id: r-1") {
		t.Errorf("commit message %q", msg)
	}
	if got := serverRef(t, srv, "refs/heads/main"); got != srv.Head {
		t.Errorf("main moved: %s", got)
	}
}

// A follow-up naming the same branch starts from its head, in the
// workspace's clone (fetched) or in a new one, and its output lists only
// its own commits; one the agent made itself is pushed as it is.
func TestFollowUpContinuesTheBranch(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	g := protocol.Git{Remote: srv.RepoURL(), Branch: "fix/x"}
	p := Params{Workspace: t.TempDir(), Env: gitEnv(t)}
	w, err := Prepare(context.Background(), p, g)
	if err != nil {
		t.Fatal(err)
	}
	write(t, w.Dir, "a.txt", "a\n")
	first, err := w.Finish(context.Background(), FinishArgs{Subject: "first", RequestID: "r-1"})
	if err != nil || !first.Pushed {
		t.Fatalf("%+v %v", first, err)
	}
	for _, ws := range []string{p.Workspace, t.TempDir()} { // the clone fetched, then a new clone
		p := p
		p.Workspace = ws
		w, err := Prepare(context.Background(), p, g)
		if err != nil {
			t.Fatal(err)
		}
		start := serverRef(t, srv, "refs/heads/fix/x")
		if b, err := os.ReadFile(filepath.Join(w.Dir, "a.txt")); err != nil || string(b) != "a\n" {
			t.Fatalf("the follow-up's tree lacks the branch's work: %q %v", b, err)
		}
		write(t, w.Dir, "b.txt", ws+"\n")
		testkit.Git(t, w.Dir, nil, "add", "b.txt")
		testkit.Git(t, w.Dir, nil, "commit", "-q", "-m", "the agent's own")
		out, err := w.Finish(context.Background(), FinishArgs{Subject: "unused", RequestID: "r-2"})
		if err != nil {
			t.Fatal(err)
		}
		if out.StartCommit != start || out.Uncommitted || !out.Pushed || len(out.Commits) != 1 ||
			out.Commits[0].Subject != "the agent's own" || out.HeadCommit != serverRef(t, srv, "refs/heads/fix/x") {
			t.Fatalf("follow-up output %+v", out)
		}
	}
}

// A task that changed nothing says so, and pushes nothing.
func TestNothingChangedSaysSo(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	w, err := Prepare(context.Background(), Params{Workspace: t.TempDir(), Env: gitEnv(t)}, protocol.Git{Remote: srv.RepoURL(), Branch: "agentvisor/idle"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := w.Finish(context.Background(), FinishArgs{RequestID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Changed || out.Pushed || out.HeadCommit != srv.Head || out.StartCommit != srv.Head || len(out.Commits) != 0 || out.Patch != "" {
		t.Fatalf("output %+v", out)
	}
	if got := serverRef(t, srv, "refs/heads/agentvisor/idle"); got != "" {
		t.Errorf("an empty branch was pushed: %s", got)
	}
}

// A failed task's work is pushed (the output says where), unless its git
// says discard_on_failure.
func TestFailedTaskKeepsItsWorkUnlessDiscarded(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	for _, discard := range []bool{false, true} {
		g := protocol.Git{Remote: srv.RepoURL(), Branch: "agentvisor/failed-" + map[bool]string{false: "kept", true: "discarded"}[discard], DiscardOnFailure: discard}
		w, err := Prepare(context.Background(), Params{Workspace: t.TempDir(), Env: gitEnv(t)}, g)
		if err != nil {
			t.Fatal(err)
		}
		write(t, w.Dir, "half.txt", "half done\n")
		out, err := w.Finish(context.Background(), FinishArgs{Failed: true, RequestID: "r"})
		if err != nil {
			t.Fatal(err)
		}
		onServer := serverRef(t, srv, "refs/heads/"+g.Branch)
		if discard && (out.Pushed || !out.Discarded || onServer != "") || !discard && (!out.Pushed || out.Discarded || onServer != out.HeadCommit) {
			t.Errorf("discard %v: output %+v, server %q", discard, out, onServer)
		}
	}
}

// A patch past MaxGitPatchBytes is cut at a line, and says so.
func TestLongPatchIsCut(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	w, err := Prepare(context.Background(), Params{Workspace: t.TempDir(), Env: gitEnv(t)}, protocol.Git{Remote: srv.RepoURL(), Branch: "big"})
	if err != nil {
		t.Fatal(err)
	}
	write(t, w.Dir, "big.txt", strings.Repeat("a line of forty characters, give or take\n", 10000))
	out, err := w.Finish(context.Background(), FinishArgs{RequestID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if !out.PatchTruncated || len(out.Patch) > protocol.MaxGitPatchBytes || out.PatchBytes <= len(out.Patch) ||
		!strings.HasSuffix(out.Patch, "\n") || out.Insertions != 10000 {
		t.Fatalf("patch of %d bytes (whole %d), truncated %v, +%d", len(out.Patch), out.PatchBytes, out.PatchTruncated, out.Insertions)
	}
}

// What cannot be made is an *Error naming the step: a remote that is not
// there, a base that is not on it.
func TestPrepareErrorsNameTheStep(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	for _, tt := range []struct {
		name string
		g    protocol.Git
		step string
	}{
		{"no such repository", protocol.Git{Remote: srv.URL + "/nope.git", Branch: "b"}, "clone"},
		{"no such base", protocol.Git{Remote: srv.RepoURL(), Branch: "b", Base: "release-9"}, "checkout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Prepare(context.Background(), Params{Workspace: t.TempDir(), Env: gitEnv(t)}, tt.g)
			e, ok := err.(*Error)
			if !ok || e.Step != tt.step {
				t.Fatalf("err %v, want a git %s error", err, tt.step)
			}
		})
	}
}

// pushToMain is someone else's commit on the remote's main while a task
// works: file made text.
func pushToMain(t *testing.T, srv *testkit.GitServer, file, text string) string {
	t.Helper()
	other := filepath.Join(t.TempDir(), "other")
	testkit.Git(t, filepath.Dir(other), nil, "clone", "-q", srv.RepoURL(), other)
	write(t, other, file, text)
	testkit.Git(t, other, nil, "add", file)
	testkit.Git(t, other, nil, "commit", "-q", "-m", "someone else's")
	testkit.Git(t, other, nil, "push", "-q", "origin", "main")
	return testkit.Git(t, other, nil, "rev-parse", "HEAD")
}

// When the base moved while the agent worked, the output says so and
// whether the branch still merges into it; nothing is merged or rebased.
func TestMovedBaseSaysWhetherTheBranchMerges(t *testing.T) {
	for _, tt := range []struct {
		name      string
		mainFile  string
		mainText  string // "" : main does not move
		clean     bool
		conflicts []string
	}{
		{"base still", "", "", true, nil},
		{"base moved elsewhere", "NEWS", "a file of main's\n", true, nil},
		{"base moved on the same line", "README", "goodbye\n", false, []string{"README"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := testkit.StartPlainGitServer(t)
			w, err := Prepare(context.Background(), Params{Workspace: t.TempDir(), Env: gitEnv(t)}, protocol.Git{Remote: srv.RepoURL(), Branch: "b"})
			if err != nil {
				t.Fatal(err)
			}
			write(t, w.Dir, "README", "hello from the task\n")
			moved := ""
			if tt.mainText != "" {
				moved = pushToMain(t, srv, tt.mainFile, tt.mainText)
			}
			out, err := w.Finish(context.Background(), FinishArgs{RequestID: "r"})
			if err != nil {
				t.Fatal(err)
			}
			if out.BaseHead != moved || out.BaseCommit != srv.Head || out.MergesCleanly == nil || *out.MergesCleanly != tt.clean ||
				strings.Join(out.Conflicts, ",") != strings.Join(tt.conflicts, ",") || !out.Pushed {
				t.Fatalf("base_head %q (moved %q), merges cleanly %v, conflicts %v, pushed %v", out.BaseHead, moved, out.MergesCleanly, out.Conflicts, out.Pushed)
			}
			if moved != "" && serverRef(t, srv, "refs/heads/main") != moved {
				t.Error("main was changed")
			}
			if testkit.Git(t, w.Dir, nil, "rev-parse", "HEAD") != out.HeadCommit {
				t.Error("the worktree's HEAD moved: something was merged")
			}
		})
	}
}

// Two workers on one repository at once, each on its branch: both
// pushed, neither sees the other's change.
func TestTwoWorkersOneRepository(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	type result struct {
		out *protocol.GitOutput
		err error
	}
	results := make(chan result, 2)
	for _, name := range []string{"one", "two"} {
		go func() {
			w, err := Prepare(context.Background(), Params{Workspace: t.TempDir(), Env: gitEnv(t)}, protocol.Git{Remote: srv.RepoURL(), Branch: "agentvisor/" + name})
			if err != nil {
				results <- result{nil, err}
				return
			}
			if err := os.WriteFile(filepath.Join(w.Dir, name+".txt"), []byte(name+"\n"), 0o644); err != nil {
				results <- result{nil, err}
				return
			}
			out, err := w.Finish(context.Background(), FinishArgs{RequestID: name})
			results <- result{out, err}
		}()
	}
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if !r.out.Pushed || len(r.out.Files) != 1 || serverRef(t, srv, "refs/heads/"+r.out.Branch) != r.out.HeadCommit {
			t.Errorf("%s: %+v", r.out.Branch, r.out)
		}
	}
}

// What the agent does to the clone's configuration does not send the
// task's work elsewhere: the push goes to the task's remote by its URL.
func TestPushGoesToTheTaskRemoteWhateverTheCloneSays(t *testing.T) {
	srv := testkit.StartPlainGitServer(t)
	w, err := Prepare(context.Background(), Params{Workspace: t.TempDir(), Env: gitEnv(t)}, protocol.Git{Remote: srv.RepoURL(), Branch: "b"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Git(t, w.Dir, nil, "remote", "set-url", "--push", "origin", srv.URL+"/elsewhere.git")
	write(t, w.Dir, "x.txt", "x\n")
	out, err := w.Finish(context.Background(), FinishArgs{RequestID: "r"})
	if err != nil || !out.Pushed || serverRef(t, srv, "refs/heads/b") != out.HeadCommit {
		t.Fatalf("%+v %v", out, err)
	}
}

// As PID 1 (or a subreaper) the wrapper reaps every child with
// wait4(-1): git started through its Reaper still has its status read
// and its output whole. The remote is a local bare repository: the test
// process runs no other child (the CGI git server's would be reaped too).
func TestGitRunsUnderTheReaper(t *testing.T) {
	srv := t.TempDir()
	bare := filepath.Join(srv, "repo.git")
	testkit.Git(t, srv, nil, "init", "-q", "--bare", "-b", "main", bare)
	work := filepath.Join(srv, "work")
	testkit.Git(t, srv, nil, "init", "-q", "-b", "main", work)
	write(t, work, "README", "hi\n")
	testkit.Git(t, work, nil, "add", "README")
	testkit.Git(t, work, nil, "commit", "-q", "-m", "first")
	testkit.Git(t, work, nil, "push", "-q", bare, "main")

	r := reaper.New()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()
	w, err := Prepare(context.Background(), Params{Workspace: t.TempDir(), Env: gitEnv(t), Starter: r}, protocol.Git{Remote: bare, Branch: "b"})
	if err != nil {
		t.Fatal(err)
	}
	write(t, w.Dir, "x.txt", "x\n")
	out, err := w.Finish(context.Background(), FinishArgs{RequestID: "r"})
	if err != nil || !out.Pushed || len(out.Commits) != 1 || !strings.Contains(out.Patch, "+x") || out.MergesCleanly == nil || !*out.MergesCleanly {
		t.Fatalf("%+v %v", out, err)
	}
}
