package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
)

// sendFlags are send's flags.
type sendFlags struct {
	project, reqID, priority, trigger string
	gitRemote, gitBase, gitBranch     string
	newSession, wait, cancelOnInt     bool
	retry                             int
	timeout                           time.Duration
}

func sendCmd(c *ctl) *cobra.Command {
	var o sendFlags
	cmd := &cobra.Command{
		Use:   "send WORKER PROMPT",
		Short: "Put a task on a worker's input; with --wait, print its progress and output",
		Long: `send puts a task on the worker's input stream and prints its request id.
With --wait it prints the task's progress and then its output, and exits
0 complete or cancelled (a cancel document ended it: it ended as its
owner asked), 4 blocked, 5 failed, 6 no output within --timeout.

Ctrl-C while it waits asks, at a terminal, whether to cancel the task
too (then it prints the cancelled output); with --cancel-on-interrupt it
cancels without asking; otherwise the task runs on and workerctl exits 1.`,
		Example:           `  workerctl send 1a2b "Fix the build" --wait`,
		Args:              args(2, "WORKER and PROMPT"),
		ValidArgsFunction: completeWorkers(c),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			id, err := c.resolve(ctx, a[0])
			if err != nil {
				return err
			}
			row, err := c.read(ctx, id)
			if err != nil {
				return err
			}
			task, err := o.task(row.ProjectID, a[1])
			if err != nil {
				return err
			}
			tasks := &client.Tasks{Redis: c.rdb, Keys: c.keys, Wait: c.wait}
			sent, err := tasks.Send(ctx, id, task)
			var se *spawner.Error
			if errors.As(err, &se) && se.Code == protocol.CodeInvalidTask {
				return fail(exitUsage, "send: %v", err)
			}
			if err != nil {
				return err
			}
			if !o.wait {
				if c.json {
					return printJSON(c.out, map[string]string{"request_id": task.RequestID, "worker_id": id})
				}
				fmt.Fprintln(c.out, task.RequestID)
				return nil
			}
			return o.await(cmd, c, tasks, sent)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.project, "project", "", "the task's project (default: the worker's)")
	f.StringVar(&o.reqID, "id", "", "the request id (default: cli-<nanoseconds>)")
	f.StringVar(&o.priority, "priority", "", "high, normal or low: the developer queue the task goes to (a long-lived worker reads its input in order)")
	f.BoolVar(&o.newSession, "new-session", false, "start a new agent session instead of continuing the project's")
	f.IntVar(&o.retry, "retry", 0, "ask for retries after a retryable failure: attempts in all, the first included (0: never retried); the backoff is the manager's RETRY_BACKOFF_MS")
	f.StringVar(&o.trigger, "trigger", "manual", "what started the task, kept on its run (the run hash's trigger)")
	f.StringVar(&o.gitRemote, "git-remote", "", "the repository the task works in (https://...): the agent runs in a worktree of it, and its change is pushed to the task's branch")
	f.StringVar(&o.gitBase, "git-base", "", "with --git-remote: the branch a new branch starts from (default: the remote's default branch)")
	f.StringVar(&o.gitBranch, "git-branch", "", "with --git-remote: the branch the work goes to (default: agentvisor/<request id>)")
	f.BoolVar(&c.patch, "patch", false, "with --wait: print the patch of the task's git result too")
	f.BoolVar(&o.wait, "wait", false, "wait for the task's output; the exit code says how it ended")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "with --wait: how long to wait for the output")
	f.BoolVar(&o.cancelOnInt, "cancel-on-interrupt", false, "with --wait: Ctrl-C cancels the task without asking")
	return cmd
}

// task is the task the flags describe, of a worker of project
// workerProject.
func (o *sendFlags) task(workerProject, prompt string) (protocol.Task, error) {
	reqID, project := o.reqID, o.project
	if reqID == "" {
		reqID = fmt.Sprintf("cli-%d", time.Now().UnixNano())
	}
	if project == "" {
		project = workerProject
	}
	task := protocol.Task{RequestID: reqID, ProjectID: project, Prompt: prompt, ForceNewSession: o.newSession, Trigger: o.trigger,
		Priority: protocol.Priority(o.priority)}
	if o.retry > 0 {
		task.Retry = &protocol.RetryPolicy{Attempts: o.retry}
	}
	if o.gitRemote != "" {
		task.Git = &protocol.Git{Remote: o.gitRemote, Base: o.gitBase, Branch: o.gitBranch}
	} else if o.gitBase != "" || o.gitBranch != "" {
		return protocol.Task{}, fail(exitUsage, "send: --git-base and --git-branch want --git-remote")
	}
	return task, nil
}

// await prints a sent task's progress, then its output (--wait), and
// says how it ended in the exit code.
func (o *sendFlags) await(cmd *cobra.Command, c *ctl, tasks *client.Tasks, sent client.Sent) error {
	ctx := cmd.Context()
	reqID := sent.RequestID
	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var out *protocol.Output
	err := tasks.Watch(wctx, sent, func(ev client.Event) {
		if ev.Output != nil {
			out = ev.Output
		} else if !c.json {
			renderEvent(c.out, false, ev)
		}
	})
	switch {
	case errors.Is(err, client.ErrAwaitTimeout):
		return fail(exitTimeout, "no output for %s within %v", reqID, o.timeout)
	case ctx.Err() != nil:
		// Interrupted (Ctrl-C): the task runs on unless its owner says to
		// cancel it, with --cancel-on-interrupt or at the question. The
		// cancel gets a context of its own: ctx has ended.
		if !o.cancelOnInt && !askCancel(cmd.InOrStdin(), cmd.ErrOrStderr(), reqID) {
			return fail(exitFailed, "interrupted: task %s goes on (workerctl cancel %s %s stops it)", reqID, sent.WorkerID, reqID)
		}
		cctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		return c.cancel(cctx, tasks, sent, "interrupted in workerctl send --wait", true, 20*time.Second)
	case err != nil:
		return err
	}
	return result(c, *out)
}

// result prints a task's output and turns its status into the exit code.
func result(c *ctl, o protocol.Output) error {
	var err error
	if c.json {
		err = printJSON(c.out, o)
	} else {
		err = renderOutput(c.out, o)
		if err == nil && c.patch && o.Git != nil && o.Git.Patch != "" {
			_, err = fmt.Fprint(c.out, "\n"+o.Git.Patch)
		}
	}
	if err != nil {
		return err
	}
	switch o.Status {
	case protocol.StatusCancelled:
		// Ended as its owner asked: not a failure of the task.
		return nil
	case protocol.StatusBlocked:
		return &exitError{exitBlocked, fmt.Errorf("task %s is blocked: %s", o.RequestID, o.Question)}
	case protocol.StatusFailed:
		msg := "failed"
		if o.Error != nil {
			msg = string(o.Error.Code) + ": " + o.Error.Message
		}
		return &exitError{exitTaskFail, fmt.Errorf("task %s failed: %s", o.RequestID, msg)}
	}
	return nil
}
