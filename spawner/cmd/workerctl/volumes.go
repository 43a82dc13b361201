package main

import (
	"github.com/spf13/cobra"
)

func volumesCmd(c *ctl) *cobra.Command {
	var rm string
	cmd := &cobra.Command{
		Use:   "volumes",
		Short: "Project volumes of this prefix (this host's engine); --rm removes one no container uses",
		Args:  args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return c.withEngine(ctx, func(e *engine) error {
				if rm != "" {
					return e.s.RemoveVolume(ctx, rm)
				}
				vs, err := e.s.Volumes(ctx)
				if err != nil {
					return err
				}
				if c.json {
					return printJSON(c.out, vs)
				}
				return renderVolumes(c.out, vs)
			})
		},
	}
	cmd.Flags().StringVar(&rm, "rm", "", "remove this volume (refused while a container uses it)")
	return cmd
}
