package main

import "github.com/spf13/cobra"

func statusCmd(c *ctl) *cobra.Command {
	return &cobra.Command{
		Use:               "status WORKER",
		Short:             "One worker, with its heartbeat and its last state transitions",
		Args:              args(1, "WORKER"),
		ValidArgsFunction: completeWorkers(c),
		RunE: func(cmd *cobra.Command, a []string) error {
			id, err := c.resolve(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			r, err := c.read(cmd.Context(), id)
			if err != nil {
				return err
			}
			if r.History, err = c.fleet().History(cmd.Context(), id); err != nil {
				return err
			}
			if c.json {
				return printJSON(c.out, r)
			}
			return renderWorker(c.out, r)
		},
	}
}
