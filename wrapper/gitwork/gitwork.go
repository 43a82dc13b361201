// Package gitwork is a task's git work: before the agent runs, a
// worktree of the task's repository on the task's branch (a clone, or a
// fetch into the clone the workspace has already); when it stops, a
// commit of what it left uncommitted, the branch pushed, and what it all
// came to (protocol.GitOutput). It runs the real git, with the agent's
// own environment (its egress proxy and the insteadOf that takes git
// through the gateway's credential; never the wrapper's secrets), and
// tells the gateway, through a Granter, which branch the worker may push
// to while the task runs.
package gitwork

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// Granter tells the gateway where the worker may push: the task's
// repository and branch (Grant), and nowhere once the task is done
// (Revoke). Nil for a worker without a gateway.
type Granter interface {
	Grant(ctx context.Context, g protocol.Git) error
	Revoke(ctx context.Context) error
}

// Params are what a task's git work needs of the worker.
type Params struct {
	// Workspace is where the repositories are cloned, one directory
	// each, named by the remote's last path element.
	Workspace string
	// Env is git's environment: the agent's (its proxy, the insteadOf of
	// the credentialed hosts, HOME).
	Env     []string
	Granter Granter // nil: no gateway to tell
	Log     *slog.Logger
	// Starter starts git (the wrapper's reaper: it reaps every child);
	// nil: agent.DirectStarter.
	Starter agent.Starter
	// Timeout bounds each network step (clone, fetch, push); 0: 10
	// minutes.
	Timeout time.Duration
}

// Work is one task's worktree, from Prepare to Finish.
type Work struct {
	p   Params
	git protocol.Git // the task's, branch filled in
	// Dir is the worktree: where the agent runs.
	Dir string

	base        string // the ref the branch was made from, as the output names it
	baseCommit  string
	startCommit string // where the task started (the branch's head on the remote, or baseCommit)
	existed     bool   // the branch was on the remote when the task started
}

// Error is a step of the git work that failed, with git's own words.
type Error struct {
	Step string // "clone", "fetch", "checkout", "commit", "push", ...
	Err  error
}

func (e *Error) Error() string { return "git " + e.Step + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Prepare makes the worktree of g (its branch set: Task.EffectiveGit) for
// a task: a clone of the remote into the workspace, or a fetch into the
// clone there; the branch checked out at its head on the remote when it
// is there (a retry or a follow-up continues it), else made from the
// base; the worktree cleaned of what the last task left. It then grants
// the branch to the worker's pushes.
func Prepare(ctx context.Context, p Params, g protocol.Git) (*Work, error) {
	if p.Log == nil {
		p.Log = slog.New(slog.DiscardHandler)
	}
	if p.Timeout <= 0 {
		p.Timeout = 10 * time.Minute
	}
	if p.Starter == nil {
		p.Starter = agent.DirectStarter{}
	}
	w := &Work{p: p, git: g, Dir: filepath.Join(p.Workspace, repoDirName(g.Remote))}
	if err := w.fetch(ctx); err != nil {
		return nil, err
	}
	if err := w.resolve(ctx); err != nil {
		return nil, err
	}
	if _, err := w.run(ctx, "checkout", "-q", "-f", "-B", g.Branch, w.startCommit); err != nil {
		return nil, &Error{"checkout", err}
	}
	if _, err := w.run(ctx, "clean", "-q", "-ffd"); err != nil {
		return nil, &Error{"checkout", err}
	}
	if p.Granter != nil {
		if err := p.Granter.Grant(ctx, g); err != nil {
			return nil, &Error{"grant", err}
		}
	}
	p.Log.Info("git worktree ready", "dir", w.Dir, "branch", g.Branch, "start", w.startCommit, "continued", w.existed)
	return w, nil
}

// fetch clones the remote, or fetches into the clone the workspace has.
func (w *Work) fetch(ctx context.Context) error {
	if w.holdsOther(ctx) {
		// Another repository of the same name: a directory of its own,
		// so that two repositories' trees never mix.
		w.Dir += "-" + fmt.Sprintf("%x", sha256.Sum256([]byte(w.git.Remote)))[:8]
	}
	if _, err := os.Stat(filepath.Join(w.Dir, ".git")); err == nil {
		origin, err := w.run(ctx, "config", "--get", "remote.origin.url")
		if err != nil || strings.TrimSpace(origin) != w.git.Remote {
			return &Error{"fetch", fmt.Errorf("%s holds a clone of %q, not of %q", w.Dir, strings.TrimSpace(origin), w.git.Remote)}
		}
		// The remote by its URL, not by the clone's configuration, which
		// the agent may have changed.
		if _, err := w.netRun(ctx, w.Dir, "fetch", "-q", "--prune", "--no-tags", w.git.Remote, "+refs/heads/*:refs/remotes/origin/*"); err != nil {
			return &Error{"fetch", err}
		}
		return nil
	} else if entries, err := os.ReadDir(w.Dir); err == nil && len(entries) > 0 {
		return &Error{"clone", fmt.Errorf("%s is there and is no clone", w.Dir)}
	}
	if err := os.MkdirAll(w.p.Workspace, 0o755); err != nil {
		return &Error{"clone", err}
	}
	if _, err := w.netRun(ctx, w.p.Workspace, "clone", "-q", "--no-checkout", "--no-tags", w.git.Remote, w.Dir); err != nil {
		return &Error{"clone", err}
	}
	return nil
}

// holdsOther reports whether w.Dir is a clone of another remote.
func (w *Work) holdsOther(ctx context.Context) bool {
	if _, err := os.Stat(filepath.Join(w.Dir, ".git")); err != nil {
		return false
	}
	origin, err := w.run(ctx, "config", "--get", "remote.origin.url")
	return err == nil && strings.TrimSpace(origin) != w.git.Remote
}

// resolve finds the base's commit and where the task starts.
func (w *Work) resolve(ctx context.Context) error {
	base := w.git.Base
	switch {
	case base == "":
		head, err := w.run(ctx, "symbolic-ref", "-q", "refs/remotes/origin/HEAD")
		if err != nil {
			// A clone made before the remote had a default branch.
			if _, err := w.netRun(ctx, w.Dir, "remote", "set-head", "origin", "--auto"); err != nil {
				return &Error{"fetch", fmt.Errorf("the remote's default branch: %w", err)}
			}
			if head, err = w.run(ctx, "symbolic-ref", "-q", "refs/remotes/origin/HEAD"); err != nil {
				return &Error{"fetch", fmt.Errorf("the remote's default branch: %w", err)}
			}
		}
		w.base = strings.TrimPrefix(strings.TrimSpace(head), "refs/remotes/origin/")
	default:
		w.base = base
	}
	var candidates []string
	switch {
	case strings.HasPrefix(w.base, "refs/heads/"):
		candidates = []string{"refs/remotes/origin/" + strings.TrimPrefix(w.base, "refs/heads/")}
	case strings.HasPrefix(w.base, "refs/"):
		// A ref the clone does not fetch (a tag, a pull request's head):
		// fetched on its own.
		if _, err := w.netRun(ctx, w.Dir, "fetch", "-q", "--no-tags", w.git.Remote, "+"+w.base+":refs/agentvisor/base"); err != nil {
			return &Error{"fetch", fmt.Errorf("base %s: %w", w.base, err)}
		}
		candidates = []string{"refs/agentvisor/base"}
	default:
		candidates = []string{"refs/remotes/origin/" + w.base, w.base}
	}
	for _, c := range candidates {
		if out, err := w.run(ctx, "rev-parse", "-q", "--verify", c+"^{commit}"); err == nil {
			w.baseCommit = strings.TrimSpace(out)
			break
		}
	}
	if w.baseCommit == "" {
		return &Error{"checkout", fmt.Errorf("base %q is not on the remote", w.base)}
	}
	w.startCommit = w.baseCommit
	if out, err := w.run(ctx, "rev-parse", "-q", "--verify", "refs/remotes/origin/"+w.git.Branch+"^{commit}"); err == nil {
		w.startCommit, w.existed = strings.TrimSpace(out), true
	}
	return nil
}

// FinishArgs are what Finish is told of the task's end.
type FinishArgs struct {
	Failed    bool   // the task failed or was cancelled
	Subject   string // the commit's subject when the task's git names none
	Summary   string // the agent's final text: the commit's body
	RequestID string
}

// Finish is how the task's work ends: what the agent left uncommitted
// committed, the branch pushed unless the task failed and its git says
// discard_on_failure, and the output's git. A failure to commit or push
// is an *Error (step "commit" or "push") beside an output that says what
// is where (Pushed false); the grant is revoked whatever happens.
func (w *Work) Finish(ctx context.Context, f FinishArgs) (*protocol.GitOutput, error) {
	if w.p.Granter != nil {
		defer func() {
			// The task is done: the worker may push nowhere (a bounded
			// call of its own, whatever ctx became).
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := w.p.Granter.Revoke(rctx); err != nil {
				w.p.Log.Warn("git: revoke the push grant", "err", err)
			}
		}()
	}
	out := &protocol.GitOutput{Remote: w.git.Remote, Branch: w.git.Branch, Base: w.base,
		BaseCommit: w.baseCommit, StartCommit: w.startCommit, HeadCommit: w.startCommit, Pushed: w.existed}
	committed, err := w.commitLeftovers(ctx, f)
	if err != nil {
		return out, &Error{"commit", err}
	}
	out.Uncommitted = committed
	head, err := w.run(ctx, "rev-parse", "HEAD")
	if err != nil {
		return out, &Error{"commit", err}
	}
	out.HeadCommit = strings.TrimSpace(head)
	if out.HeadCommit == w.startCommit {
		return out, nil // changed nothing: nothing to push
	}
	out.Changed, out.Pushed = true, false
	if err := w.describe(ctx, out); err != nil {
		return out, err
	}
	if err := w.checkBase(ctx, out); err != nil {
		return out, err
	}
	if f.Failed && w.git.DiscardOnFailure {
		out.Discarded = true
		return out, nil
	}
	if err := w.push(ctx); err != nil {
		return out, &Error{"push", err}
	}
	out.Pushed = true
	return out, nil
}

// commitLeftovers commits what is changed in the worktree, if anything.
func (w *Work) commitLeftovers(ctx context.Context, f FinishArgs) (bool, error) {
	if _, err := w.run(ctx, "add", "-A"); err != nil {
		return false, err
	}
	if _, err := w.run(ctx, "diff", "--cached", "--quiet"); err == nil {
		return false, nil // nothing staged
	}
	msg := commitMessage(w.git.Message, f)
	name, email := w.git.AuthorName, w.git.AuthorEmail
	if name == "" {
		name = protocol.DefaultGitAuthorName
	}
	if email == "" {
		email = protocol.DefaultGitAuthorEmail
	}
	mf, err := os.CreateTemp("", "agentvisor-commit-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(mf.Name())
	_, err = mf.WriteString(msg)
	if cerr := mf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	env := []string{"GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + email, "GIT_COMMITTER_NAME=" + name, "GIT_COMMITTER_EMAIL=" + email}
	if err := w.exec(ctx, w.Dir, nil, env, "commit", "-q", "--no-verify", "-F", mf.Name()); err != nil {
		return false, err
	}
	return true, nil
}

// commitMessage is the wrapper's commit's message: the subject (the
// task's message, else the caller's), the agent's summary, and the
// request as a trailer.
func commitMessage(subject string, f FinishArgs) string {
	if subject == "" {
		subject = f.Subject
	}
	subject, _, _ = strings.Cut(strings.TrimSpace(subject), "\n")
	if len(subject) > 72 {
		subject = cutUTF8(subject, 69) + "..."
	}
	if subject == "" {
		subject = "Work of task " + f.RequestID
	}
	var b strings.Builder
	b.WriteString(subject + "\n")
	if s := strings.TrimSpace(f.Summary); s != "" {
		b.WriteString("\n" + cutUTF8(s, 16<<10) + "\n")
	}
	if f.RequestID != "" {
		b.WriteString("\nAgentvisor-Request-Id: " + f.RequestID + "\n")
	}
	return b.String()
}

// push pushes HEAD to the task's branch, the grant put again first (a
// gateway restarted meanwhile holds none).
func (w *Work) push(ctx context.Context) error {
	if w.p.Granter != nil {
		if err := w.p.Granter.Grant(ctx, w.git); err != nil {
			return fmt.Errorf("grant: %w", err)
		}
	}
	// To the remote's URL: a pushurl or remote the agent configured in
	// the clone is not where the task's work goes.
	args := []string{"push", "-q", "--no-verify", w.git.Remote, "HEAD:refs/heads/" + w.git.Branch}
	if w.git.AllowForcePush {
		args = append(args[:2], append([]string{"--force"}, args[2:]...)...)
	}
	_, err := w.netRun(ctx, w.Dir, args...)
	return err
}

// describe fills the commits, the diffstat and the patch of
// start..head into out.
func (w *Work) describe(ctx context.Context, out *protocol.GitOutput) error {
	span := w.startCommit + ".." + out.HeadCommit
	log, err := w.run(ctx, "log", "--no-color", "-z", "--format=%H%x1f%an <%ae>%x1f%s", "-n", strconv.Itoa(protocol.MaxGitCommits), span)
	if err != nil {
		return &Error{"log", err}
	}
	for _, rec := range strings.Split(log, "\x00") {
		f := strings.Split(strings.TrimSpace(rec), "\x1f")
		if len(f) == 3 {
			out.Commits = append(out.Commits, protocol.GitCommit{SHA: f[0], Author: f[1], Subject: f[2]})
		}
	}
	stat, err := w.run(ctx, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--numstat", "-z", w.startCommit, out.HeadCommit)
	if err != nil {
		return &Error{"diff", err}
	}
	for _, rec := range strings.Split(stat, "\x00") {
		added, rest, ok1 := strings.Cut(rec, "\t")
		deleted, path, ok2 := strings.Cut(rest, "\t")
		if !ok1 || !ok2 {
			continue
		}
		fs := protocol.GitFileStat{Path: path}
		if added == "-" {
			fs.Binary = true
		} else {
			fs.Insertions, _ = strconv.Atoi(added)
			fs.Deletions, _ = strconv.Atoi(deleted)
		}
		out.Insertions += fs.Insertions
		out.Deletions += fs.Deletions
		if len(out.Files) < protocol.MaxGitFiles {
			out.Files = append(out.Files, fs)
		}
	}
	patch := &boundedBuffer{max: protocol.MaxGitPatchBytes}
	if err := w.exec(ctx, w.Dir, patch, nil, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--binary", w.startCommit, out.HeadCommit); err != nil {
		return &Error{"diff", err}
	}
	out.Patch, out.PatchTruncated, out.PatchBytes = patch.text(), patch.total > int64(protocol.MaxGitPatchBytes), int(patch.total)
	return nil
}

// checkBase says whether the base moved while the task worked, and
// whether the branch merges into it as it is now (git merge-tree, which
// merges nothing: no ref or file of the worktree changes).
func (w *Work) checkBase(ctx context.Context, out *protocol.GitOutput) error {
	baseNow := w.baseCommit
	if branch, ok := w.baseBranch(); ok {
		ref := "refs/remotes/origin/" + branch
		if _, err := w.netRun(ctx, w.Dir, "fetch", "-q", "--no-tags", w.git.Remote, "+refs/heads/"+branch+":"+ref); err != nil {
			w.p.Log.Warn("git: fetch the base again", "base", branch, "err", err)
		} else if head, err := w.run(ctx, "rev-parse", "-q", "--verify", ref+"^{commit}"); err == nil {
			baseNow = strings.TrimSpace(head)
		}
	}
	if baseNow != w.baseCommit {
		out.BaseHead = baseNow
	}
	var stdout bytes.Buffer
	err := w.exec(ctx, w.Dir, &stdout, nil, "merge-tree", "--write-tree", "--name-only", "--no-messages", baseNow, out.HeadCommit)
	var ee *gitExit
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.code == 1:
		// Conflicts: the tree's id, then the conflicted files.
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		for _, f := range lines[min(1, len(lines)):] {
			if f != "" && len(out.Conflicts) < protocol.MaxGitFiles {
				out.Conflicts = append(out.Conflicts, f)
			}
		}
	default:
		return &Error{"merge-tree", err}
	}
	clean := err == nil
	out.MergesCleanly = &clean
	return nil
}

// baseBranch is the base as a branch of the remote, if it is one (a
// branch can move; a tag or a commit does not).
func (w *Work) baseBranch() (string, bool) {
	switch {
	case commitRe(w.base):
		return "", false
	case strings.HasPrefix(w.base, "refs/heads/"):
		return strings.TrimPrefix(w.base, "refs/heads/"), true
	case strings.HasPrefix(w.base, "refs/"):
		return "", false
	}
	return w.base, true
}

// commitRe reports whether s is a full commit id.
func commitRe(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// boundedBuffer keeps the first max bytes written to it and counts all.
type boundedBuffer struct {
	max   int
	buf   []byte
	total int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.total += int64(len(p))
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// text is what was kept, cut at its last whole line when cut at all.
func (b *boundedBuffer) text() string {
	if b.total <= int64(b.max) {
		return string(b.buf)
	}
	if i := bytes.LastIndexByte(b.buf, '\n'); i >= 0 {
		return string(b.buf[:i+1])
	}
	return ""
}

// repoDirName is the workspace directory of a remote's clone: its last
// path element without .git (https://h/shop/api.git: api).
func repoDirName(remote string) string {
	name := "repo"
	if u, err := url.Parse(remote); err == nil {
		if b := strings.TrimSuffix(filepath.Base(strings.TrimSuffix(u.Path, "/")), ".git"); b != "" && b != "." && b != "/" && b != ".." {
			name = b
		}
	}
	return name
}

// cutUTF8 cuts s to at most n bytes, at a rune's start.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

var _ io.Writer = (*boundedBuffer)(nil)

// Branch is the task's branch.
func (w *Work) Branch() string { return w.git.Branch }
