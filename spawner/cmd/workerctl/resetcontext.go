package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentvisor/agentvisor/protocol"
)

func resetContextCmd(c *ctl) *cobra.Command {
	var agent string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "reset-context PROJECT",
		Short: "Forget a project's agent session and stored context (the next task starts afresh)",
		Args:  args(1, "PROJECT"),
		RunE: func(cmd *cobra.Command, a []string) error {
			if !protocol.AgentType(agent).Valid() {
				return fail(exitUsage, "reset-context: --agent %q: want claude, droid, codex, opencode, qwen or acp", agent)
			}
			r, err := c.do(cmd.Context(), protocol.Command{Action: protocol.ActionResetContext, ProjectID: a[0],
				AgentType: protocol.AgentType(agent)}, timeout)
			if err != nil {
				return err
			}
			if c.json {
				return printJSON(c.out, r)
			}
			fmt.Fprintf(c.out, "%s (%s): context reset\n", a[0], agent)
			return nil
		},
	}
	cmd.Flags().StringVar(&agent, "agent", string(protocol.AgentClaude), "whose session: claude, droid, codex, opencode, qwen or acp")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the manager's reply")
	_ = cmd.RegisterFlagCompletionFunc("agent", fixed(string(protocol.AgentClaude), string(protocol.AgentDroid), string(protocol.AgentCodex), string(protocol.AgentOpenCode), string(protocol.AgentQwen), string(protocol.AgentACP)))
	return cmd
}
