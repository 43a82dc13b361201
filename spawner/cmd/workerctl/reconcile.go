package main

import (
	"github.com/spf13/cobra"
)

func reconcileCmd(c *ctl) *cobra.Command {
	return &cobra.Command{
		Use:   "reconcile",
		Short: "Make Redis and this host's containers agree now, and say what was fixed",
		Long: `reconcile runs one reconciliation pass, the leader's (RECONCILE_INTERVAL),
from here and now: labelled containers no record knows (older than
CREATION_GRACE) are removed, workers whose container is gone or exited are
retired, a container stuck in "created" is started, retirements whose
manager died are finished. Every fix goes through the same leases as the
leader's, so it is safe while managers run. It needs this host's Docker
engine and reads the managers' settings from the environment.`,
		Args: args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withEngine(cmd.Context(), func(e *engine) error {
				rep, err := e.s.Reconcile(cmd.Context())
				if err != nil {
					return err
				}
				if c.json {
					return printJSON(c.out, rep)
				}
				return renderReconcile(c.out, rep)
			})
		},
	}
}
