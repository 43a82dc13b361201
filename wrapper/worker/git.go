package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/gitwork"
)

// A task with git (its own, or the worker's default): between admit and
// the attempts, its worktree (gitwork.Prepare), where the agent then
// runs; between the attempts and finish, its work committed, pushed and
// described on the output (gitwork.Work.Finish). The steps are the
// gitwork package's; this file says when they run and what their
// failures make of the output.

// gitFinishTimeout bounds a task's commit and push.
const gitFinishTimeout = 10 * time.Minute

// gitParams are what a task's git work is given of the worker.
type gitParams struct {
	workspace string
	def       *protocol.Git // the spec's git (WORKER_GIT)
	// granter tells the gateway the task's branch; nil without a
	// gateway (no egress socket, or no worker token).
	granter func() gitwork.Granter
}

// prepareGit makes the task's worktree, when it has git, and makes it
// where the agent runs. It reports false when the worktree could not be
// made: the task is answered GIT_WORKTREE_FAILED, the agent never ran.
func (t *taskRun) prepareGit() (*gitwork.Work, bool) {
	ts, cur := t.ts, t.cur
	g := t.task.EffectiveGit(ts.git.def)
	if g == nil {
		return nil, true
	}
	p := gitwork.Params{Workspace: ts.git.workspace, Env: ts.agents.env(cur.progressToken(), t.task), Log: t.log,
		Starter: ts.agents.starter} // the reaper: it reaps every child of PID 1
	if ts.git.granter != nil {
		p.Granter = ts.git.granter()
	}
	work, err := gitwork.Prepare(t.ctx, p, *g)
	if err != nil {
		t.log.Warn("git worktree failed", "err", err)
		o := ts.outputs.unrun(t.task, protocol.NewError(protocol.CodeGitWorktree, "%s", ts.outputs.redact.Redact(err.Error())))
		o.ProjectID, o.Answers, o.Attempt = t.task.Project(), t.task.Answers, cur.attempt
		t.finish(o, nil)
		return nil, false
	}
	cur.mu.Lock()
	cur.dir = work.Dir
	cur.mu.Unlock()
	ts.pub.progress(cur, fmt.Sprintf("git: working on branch %s of %s", g.Branch, g.Remote), "")
	return work, true
}

// finishGit commits and pushes the task's work and puts what it came to
// on o. A commit or push that fails makes a task that had ended well
// failed with GIT_PUSH_FAILED; a task that failed already keeps its own
// error, its git saying what was not pushed.
func (t *taskRun) finishGit(work *gitwork.Work, o protocol.Output) protocol.Output {
	if work == nil {
		return o
	}
	redact := t.ts.outputs.redact
	failed := o.Status == protocol.StatusFailed || o.Status == protocol.StatusCancelled
	subject, _, _ := strings.Cut(strings.TrimSpace(t.task.Prompt), "\n")
	// The push is the task's last step: it gets its own bound, after a
	// cancel or a timeout too, so that a stopped task's work is kept.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), gitFinishTimeout)
	defer cancel()
	g, err := work.Finish(ctx, gitwork.FinishArgs{Failed: failed, Subject: subject, Summary: o.Response, RequestID: t.task.RequestID})
	if g != nil {
		g.Patch = redact.Redact(g.Patch)
		if len(g.Patch) > protocol.MaxGitPatchBytes {
			g.Patch, g.PatchTruncated = cutUTF8(g.Patch, protocol.MaxGitPatchBytes), true
		}
		for i := range g.Commits {
			g.Commits[i].Subject = redact.Redact(g.Commits[i].Subject)
		}
		o.Git = g
	}
	if err != nil {
		t.log.Warn("git: the task's work was not pushed", "err", err)
		msg := redact.Redact(err.Error())
		if _, ok := errors.AsType[*gitwork.Error](err); !ok {
			msg = "git: " + msg
		}
		if !failed {
			o.Status, o.Result, o.Question = protocol.StatusFailed, nil, ""
			o.Error = protocol.NewError(protocol.CodeGitPush, "the task's work is in the worktree, not on branch %s: %s", work.Branch(), msg)
		}
		return o
	}
	t.log.Info("git: the task's work", "branch", g.Branch, "changed", g.Changed, "pushed", g.Pushed, "head", g.HeadCommit, "commits", len(g.Commits))
	return o
}

// gitGranter is the gateway's push grant for a sealed worker (its egress
// socket and its token), nil for one without.
func (w *Worker) gitGranter() gitwork.Granter {
	if w.cfg.EgressSocket == "" || w.cfg.ModelSocketToken == "" {
		return nil
	}
	return gitwork.NewSocketGranter(w.cfg.EgressSocket, w.cfg.ModelSocketToken)
}
