package main

import (
	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/spawner"
)

func poolsCmd(c *ctl) *cobra.Command {
	return &cobra.Command{
		Use:   "pools",
		Short: "Warm pools and pool sizes: warm, allocated, utilization, allocation wait, refills, recycles",
		Long: `pools shows each pool the managers of this prefix serve (POOLS on the
manager), from Redis: its warm workers ready for a create, the workers it
gave to creates and still alive, its fixed-size members, and its counters.`,
		Args: args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := spawner.ListPools(cmd.Context(), c.rdb, c.keys)
			if err != nil {
				return err
			}
			if c.json {
				return printJSON(c.out, ps)
			}
			return renderPools(c.out, ps)
		},
	}
}
