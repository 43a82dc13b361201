package main

import (
	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

func hibernateCmd(c *ctl) *cobra.Command {
	return actionCmd(c, "hibernate", "Hibernate an idle long-lived worker: its container goes, its id, streams and session stay; a task wakes it (refused with WORKER_BUSY while it has a task)", protocol.ActionHibernate)
}
