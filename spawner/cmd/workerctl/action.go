package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

// actionCmd is a command on one worker that a worker-manager executes
// (pause, resume, kill).
func actionCmd(c *ctl, name, short string, a protocol.Action) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               name + " WORKER",
		Short:             short,
		Args:              args(1, "WORKER"),
		ValidArgsFunction: completeWorkers(c),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := c.resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			r, err := c.do(cmd.Context(), protocol.Command{Action: a, WorkerID: id}, timeout)
			if err != nil {
				return err
			}
			if c.json {
				return printJSON(c.out, r)
			}
			fmt.Fprintf(c.out, "%s: %s done\n", id, name)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the manager's reply")
	return cmd
}
