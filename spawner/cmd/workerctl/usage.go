package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
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
			if len(projects) == 0 {
				prefix := c.keys.UsageProject("")
				iter := c.rdb.Scan(ctx, 0, prefix+"*", 200).Iterator()
				for iter.Next(ctx) {
					projects = append(projects, strings.TrimPrefix(iter.Val(), prefix))
				}
				if err := iter.Err(); err != nil {
					return fmt.Errorf("redis: %w", err)
				}
				sort.Strings(projects)
			}
			rows := make([]usageRow, 0, len(projects))
			for _, p := range projects {
				h, err := c.rdb.HGetAll(ctx, c.keys.UsageProject(p)).Result()
				if err != nil {
					return fmt.Errorf("redis: %w", err)
				}
				n := func(f string) int64 { v, _ := strconv.ParseInt(h[f], 10, 64); return v }
				cost, _ := strconv.ParseFloat(h[protocol.UsageFieldCostUSD], 64)
				rows = append(rows, usageRow{ProjectID: p, Tasks: n(protocol.UsageFieldTasks), Input: n(protocol.UsageFieldInput),
					Output: n(protocol.UsageFieldOutput), CacheRead: n(protocol.UsageFieldCacheRead),
					CacheCreation: n(protocol.UsageFieldCacheCreation), CostUSD: cost})
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
