package main

import (
	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/client"
)

// usageRow is a project's cumulative usage, as client.Fleet reads it.
type usageRow = client.ProjectUsage

func usageCmd(c *ctl) *cobra.Command {
	var projects []string
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Tokens and cost per project",
		Args:  args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			f := c.fleet()
			if len(projects) == 0 {
				var err error
				if projects, err = f.UsageProjects(ctx, 0); err != nil {
					return err
				}
			}
			rows := make([]usageRow, 0, len(projects))
			for _, p := range projects {
				u, err := f.Usage(ctx, p)
				if err != nil {
					return err
				}
				rows = append(rows, u)
			}
			if c.json {
				return printJSON(c.out, rows)
			}
			return renderUsage(c.out, rows)
		},
	}
	cmd.Flags().StringArrayVar(&projects, "project", nil, "only this project (repeatable; default: every project with usage)")
	return cmd
}
