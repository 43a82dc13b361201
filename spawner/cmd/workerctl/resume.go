package main

import (
	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

func resumeCmd(c *ctl) *cobra.Command {
	return actionCmd(c, "resume", "Unpause a paused worker", protocol.ActionUnpause)
}
