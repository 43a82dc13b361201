package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/client"
)

func cancelCmd(c *ctl) *cobra.Command {
	var reason string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "cancel WORKER [REQUEST_ID]",
		Short: "Cancel a task, queued or running (default: the worker's task in flight)",
		Long: `cancel puts a cancel document on the worker's input (PROTOCOL.md,
"Cancel"): the task REQUEST_ID ends cancelled, whether it runs or still
waits in the queue; without REQUEST_ID, the task the worker's status says
is in flight. With --wait it prints the task's output (exit 0 when it
ended cancelled or complete, as send --wait).`,
		Example: `  workerctl cancel 1a2b cli-1764650000000000000 --wait`,
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) < 1 || len(a) > 2 {
				return fail(exitUsage, "cancel: want WORKER and an optional REQUEST_ID, got %d argument(s) (see workerctl cancel --help)", len(a))
			}
			return nil
		},
		ValidArgsFunction: completeWorkers(c),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			id, err := c.resolve(ctx, a[0])
			if err != nil {
				return err
			}
			reqID := ""
			if len(a) == 2 {
				reqID = a[1]
			} else {
				row, err := c.read(ctx, id)
				if err != nil {
					return err
				}
				if reqID = row.RequestID; reqID == "" {
					return fail(exitFailed, "cancel: worker %s has no task in flight; name the request id", id)
				}
			}
			tasks := &client.Tasks{Redis: c.rdb, Keys: c.keys, Wait: c.wait}
			sent, err := tasks.Of(ctx, id, reqID)
			if err != nil {
				return err
			}
			return c.cancel(ctx, tasks, sent, reason, wait, timeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "cancelled from workerctl", "why, kept on the task's output")
	f.BoolVar(&wait, "wait", false, "wait for the task's output and print it")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "with --wait: how long to wait for the output")
	return cmd
}

// cancel sends the cancel of a task and, with wait, prints its output.
func (c *ctl) cancel(ctx context.Context, tasks *client.Tasks, sent client.Sent, reason string, wait bool, timeout time.Duration) error {
	if err := tasks.Cancel(ctx, sent, reason); err != nil {
		return err
	}
	if !wait {
		if c.json {
			return printJSON(c.out, map[string]string{"request_id": sent.RequestID, "worker_id": sent.WorkerID, "cancel": "sent"})
		}
		fmt.Fprintf(c.out, "%s: cancel sent\n", sent.RequestID)
		return nil
	}
	wctx, stop := context.WithTimeout(ctx, timeout)
	defer stop()
	out, err := tasks.Await(wctx, sent, nil)
	if err != nil {
		return fail(exitTimeout, "cancel sent, no output for %s within %v: %v", sent.RequestID, timeout, err)
	}
	return result(c, out)
}

// askCancel asks, after a Ctrl-C on send --wait, whether to cancel the
// task too. It asks only someone who can answer: a terminal, or the
// reader a test gives; a pipe or a file gets no question (false).
func askCancel(in io.Reader, errw io.Writer, reqID string) bool {
	if f, ok := in.(*os.File); ok {
		st, err := f.Stat()
		if err != nil || st.Mode()&os.ModeCharDevice == 0 {
			return false
		}
	}
	fmt.Fprintf(errw, "\nstopped waiting for %s. Cancel the task too? [y/N] ", reqID)
	line, _ := bufio.NewReader(in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}
