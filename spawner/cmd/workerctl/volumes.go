package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"github.com/docker/docker/client"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
)

// volumes lists the project volumes of this prefix, or removes one no
// container uses (-rm). It talks to the Docker engine of this host.
func (c *ctl) volumes(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("volumes", flag.ContinueOnError)
	rm := fs.String("rm", "", "")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	dc, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	defer dc.Close()
	s := spawner.New(spawner.Config{Keys: c.keys}, dc, c.rdb, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if *rm != "" {
		return s.RemoveVolume(ctx, *rm)
	}
	vs, err := s.Volumes(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(vs)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VOLUME\tAGENT\tPROJECT\tLAST USED")
	for _, v := range vs {
		last := "-"
		if !v.LastUsed.IsZero() {
			last = protocol.FormatTime(v.LastUsed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, v.AgentType, v.ProjectID, last)
	}
	return tw.Flush()
}
