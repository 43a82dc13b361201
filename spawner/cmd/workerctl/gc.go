package main

import (
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"github.com/spf13/cobra"
)

func gcCmd(c *ctl) *cobra.Command {
	var dryRun bool
	var retention time.Duration
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove stale worker images of this prefix (--dry-run: list them)",
		Long: `gc runs one collection of the image GC on this host's engine: the worker
images this prefix used that nobody used for --retention and no container
uses. --dry-run lists them and removes nothing. GC_PRUNE_BUILD_CACHE=true
also prunes the build cache, as the manager's GC does.`,
		Args: args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withEngine(cmd.Context(), func(e *engine) error { return c.gc(cmd, e, dryRun, retention) })
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	cmd.Flags().DurationVar(&retention, "retention", 7*24*time.Hour, "an image unused this long is stale (default: GC_RETENTION, 168h)")
	return cmd
}

func (c *ctl) gc(cmd *cobra.Command, e *engine, dryRun bool, retention time.Duration) error {
	if !cmd.Flags().Changed("retention") {
		retention = e.ops.GCRetention
	}
	gc := &images.GC{Docker: e.dc, Redis: c.rdb, Keys: c.keys, Retention: retention, DryRun: dryRun,
		PruneBuildCache: e.cfg.PruneBuildCache, Log: quiet}
	rep, err := gc.Collect(cmd.Context())
	if err != nil {
		return err
	}
	if c.json {
		return printJSON(c.out, rep)
	}
	return renderGC(c.out, rep)
}
