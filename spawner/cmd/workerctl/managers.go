package main

import (
	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/spawner"
)

func managersCmd(c *ctl) *cobra.Command {
	return &cobra.Command{
		Use:   "managers",
		Short: "The running worker-managers: host, pid, version, uptime, last reconcile, leases",
		Long: `managers lists the worker-managers of this prefix from the state each
refreshes in Redis (worker:manager:<id>, expiring 30 s after its last
refresh): a manager that died drops out when its state expires.`,
		Args: args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := spawner.ListManagers(cmd.Context(), c.rdb, c.keys)
			if err != nil {
				return err
			}
			if c.json {
				return printJSON(c.out, ms)
			}
			return renderManagers(c.out, ms)
		},
	}
}
