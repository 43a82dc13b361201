package main

import (
	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

func killCmd(c *ctl) *cobra.Command {
	return actionCmd(c, "kill", "Retire a worker: its container is stopped and removed, its tasks answered", protocol.ActionDelete)
}
