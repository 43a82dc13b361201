package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

func networkCmd(c *ctl) *cobra.Command {
	var allow []string
	var none bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "network WORKER",
		Short: "Show a sealed worker's egress allowlist; with --allow or --none, replace it",
		Long: `network shows the egress allowlist in force for a sealed worker: the hosts
(and ports) its agent may reach through the gateway's proxy, beyond Redis
and the model API. With --allow (repeated, or comma-separated) it replaces
the list through a worker-manager (the set_network command); new
connections follow it at once, an open one stays. --none empties it: the
worker reaches nothing. Entries: host, host:port, *.suffix, *.suffix:port,
or an IP address with an optional port (no port: 443 and 80).`,
		Example: `  workerctl network 5e0c1a52
  workerctl network 5e0c1a52 --allow github.com,*.githubusercontent.com
  workerctl network 5e0c1a52 --none`,
		Args:              args(1, "WORKER"),
		ValidArgsFunction: completeWorkers(c),
		RunE: func(cmd *cobra.Command, a []string) error {
			if len(allow) > 0 && none {
				return fail(exitUsage, "network: --allow or --none, not both")
			}
			id, err := c.resolve(cmd.Context(), a[0])
			if err != nil {
				return err
			}
			command := protocol.Command{Action: protocol.ActionStatus, WorkerID: id}
			if len(allow) > 0 || none {
				if _, err := protocol.ParseEgressRules(allow); err != nil {
					return fail(exitUsage, "network: --allow: %v", err)
				}
				command = protocol.Command{Action: protocol.ActionSetNetwork, WorkerID: id, Network: &protocol.Network{Allow: allow}}
			}
			r, err := c.do(cmd.Context(), command, timeout)
			if err != nil {
				return err
			}
			if c.json {
				return printJSON(c.out, r)
			}
			var list []string
			if r.Worker != nil && r.Worker.Network != nil {
				list = r.Worker.Network.Allow
			}
			if len(list) == 0 {
				fmt.Fprintf(c.out, "%s: no egress (nothing on its allowlist)\n", id)
				return nil
			}
			fmt.Fprintf(c.out, "%s: egress to %s\n", id, strings.Join(list, ", "))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&allow, "allow", nil, "the new allowlist (repeat, or separate with commas)")
	cmd.Flags().BoolVar(&none, "none", false, "empty the allowlist")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the manager's reply")
	return cmd
}
