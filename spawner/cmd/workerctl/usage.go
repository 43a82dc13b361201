package main

import (
	"github.com/spf13/cobra"
)

// usageRow is a project's cumulative usage.
type usageRow struct {
	ProjectID     string  `json:"project_id"`
	Tasks         int64   `json:"tasks"`
	Input         int64   `json:"input"`
	Output        int64   `json:"output"`
	CacheRead     int64   `json:"cache_read"`
	CacheCreation int64   `json:"cache_creation"`
	CostUSD       float64 `json:"cost_usd"`
}

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
				rows = append(rows, usageRow(u))
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
