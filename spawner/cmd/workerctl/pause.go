package main

import (
	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

func pauseCmd(c *ctl) *cobra.Command {
	return actionCmd(c, "pause", "Pause a worker (refused with WORKER_BUSY while it has a task)", protocol.ActionPause)
}
