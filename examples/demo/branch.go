package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
)

// gitBranch gives the sealed Claude worker a task in the private git
// host's repository: the wrapper makes its worktree (a clone through the
// gateway), the agent writes a file and tries to push to a branch of its
// own, release, which the gateway refuses (a warning of the task), and the wrapper commits
// what the agent left and pushes it to the task's branch, the one branch
// the gateway lets the worker push to. The output says where it went.
// The task is of a project of its own (Claude keeps its sessions by its
// working directory, and the worktree is not the shop's), so it goes to a
// worker of that project: a long-lived worker with a project_id serves
// that project alone, its Redis user reaching no other's keys.
func (d *demo) gitBranch(ctx context.Context, _ string) error {
	d.tl.section("a branch per task: the agent's change committed and pushed through the gateway, to the task's branch only")
	spec := d.claudeSpec()
	spec.ProjectID = projectBranch
	id, err := d.create(ctx, "claude-branch", spec)
	if err != nil {
		return err
	}
	defer func() {
		if _, err := d.cli.Do(context.WithoutCancel(ctx), protocol.Command{Action: protocol.ActionDelete, WorkerID: id}); err != nil {
			d.tl.say("delete claude-branch: %v", err)
		}
	}()
	mainBefore := d.git.ref("refs/heads/main")
	task := protocol.Task{RequestID: "shop-branch", TaskID: "catalogue-notes", ProjectID: projectBranch, Prompt: promptBranch,
		Git: &protocol.Git{Remote: gitCloneURL, AuthorName: "agentvisor demo", AuthorEmail: "demo@localhost"}}
	sent, err := d.putTask(ctx, id, task, scriptBranch)
	if err != nil {
		return err
	}
	o, err := d.await(ctx, sent, protocol.StatusComplete, nil)
	if err != nil {
		return err
	}
	g := o.Git
	if g == nil || !g.Changed || !g.Pushed || g.Branch != "agentvisor/catalogue-notes" || len(g.Files) != 1 || g.Files[0].Path != "NOTES.md" {
		return fmt.Errorf("task %s: git %+v, want NOTES.md pushed to agentvisor/catalogue-notes", sent.RequestID, g)
	}
	if got := d.git.ref("refs/heads/" + g.Branch); got != g.HeadCommit {
		return fmt.Errorf("task %s: the git host has %s at %q, the output says %s", sent.RequestID, g.Branch, got, g.HeadCommit)
	}
	if got := d.git.ref("refs/heads/main"); got != mainBefore {
		return fmt.Errorf("task %s: main moved to %s", sent.RequestID, got)
	}
	if got := d.git.ref("refs/heads/release"); got != "" {
		return fmt.Errorf("task %s: the gateway let the agent's push to release through (%s)", sent.RequestID, got)
	}
	refused, err := d.refusedPush(ctx, sent)
	if err != nil {
		return err
	}
	d.tl.say("the agent's push to release: refused by the gateway, a warning of the task: %s", refused)
	d.tl.say("output git: branch %s of %s from %s, %s..%s, %d commit (%q, the wrapper's: the agent left NOTES.md uncommitted), %d file +%d -%d, merges cleanly: %v",
		g.Branch, g.Remote, g.Base, g.StartCommit[:12], g.HeadCommit[:12], len(g.Commits), g.Commits[0].Subject, len(g.Files), g.Insertions, g.Deletions, *g.MergesCleanly)
	d.tl.say("git host: %s is at %s, main where it was, no release: what a pull request needs (remote, head branch, base) is in the output", g.Branch, g.HeadCommit[:12])
	return d.tl.waitEvent(ctx, id, protocol.EventPaused, 30*time.Second)
}

// refusedPush finds the task's warning for the agent's refused push.
func (d *demo) refusedPush(ctx context.Context, sent client.Sent) (string, error) {
	msgs, err := d.rdb.XRange(ctx, sent.Output, "-", "+").Result()
	if err != nil {
		return "", err
	}
	for _, m := range msgs {
		data, err := protocol.EntryData(m.Values)
		if err != nil {
			continue
		}
		p, err := protocol.DecodeProgress(data)
		if err == nil && p.RequestID == sent.RequestID && p.Refused != nil && strings.Contains(p.Refused.Reason, "refs/heads/release") {
			return p.Refused.Reason, nil
		}
	}
	return "", fmt.Errorf("task %s: no warning for the agent's refused push to release", sent.RequestID)
}
