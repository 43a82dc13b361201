package main

import (
	"errors"
	"sort"

	"github.com/spf13/cobra"
)

func listCmd(c *ctl) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Every worker, with its status, health, task and heartbeat",
		Args:  args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			ids, err := c.fleet().Workers(ctx)
			if err != nil {
				return err
			}
			rows := make([]workerRow, 0, len(ids))
			for _, id := range ids {
				row, err := c.read(ctx, id)
				if err != nil {
					var ee *exitError
					if errors.As(err, &ee) && ee.code == exitNotFound {
						continue // removed meanwhile
					}
					return err
				}
				rows = append(rows, row)
			}
			sort.Slice(rows, func(i, j int) bool { return rows[i].CreatedAt.Before(rows[j].CreatedAt) })
			if c.json {
				return printJSON(c.out, rows)
			}
			return renderWorkers(c.out, rows)
		},
	}
}
