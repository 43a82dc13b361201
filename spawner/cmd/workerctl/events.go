package main

import (
	"sort"
	"strconv"
	"strings"

	"github.com/agentvisor/agentvisor/client"

	"github.com/spf13/cobra"
)

func eventsCmd(c *ctl) *cobra.Command {
	var follow, fromStart bool
	var worker string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Lifecycle, progress and output events, in time order",
		Long: `events prints what the lifecycle and output streams hold, in time order.
With -f it follows new entries instead (with --all, what the streams hold first).`,
		Args: args(0, "no argument"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			w := &client.Watcher{Redis: c.rdb, Keys: c.keys, FromStart: fromStart}
			if worker != "" {
				id, err := c.resolve(ctx, worker)
				if err != nil {
					return err
				}
				w.Workers = []string{id}
			}
			print := func(ev client.Event) { renderEvent(c.out, c.json, ev) }
			if follow {
				return w.Run(ctx, print)
			}
			var evs []client.Event
			for _, st := range c.streams(cmd, w.Workers) {
				entries, err := c.fleet().Entries(ctx, st)
				if err != nil {
					return err
				}
				for _, ev := range entries {
					if len(w.Workers) == 0 || ev.Err != nil || ev.WorkerID() == w.Workers[0] {
						evs = append(evs, ev)
					}
				}
			}
			sort.SliceStable(evs, func(i, j int) bool { return idBefore(evs[i].ID, evs[j].ID) })
			for _, ev := range evs {
				print(ev)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow new entries until interrupted")
	cmd.Flags().BoolVar(&fromStart, "all", false, "with -f: print what the streams hold before following them")
	cmd.Flags().StringVar(&worker, "worker", "", "only this worker's events (an id or a unique prefix)")
	_ = cmd.RegisterFlagCompletionFunc("worker", completeWorkers(c))
	return cmd
}

// idBefore orders stream entry ids (ms-seq) of different streams by time.
func idBefore(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseInt(am, 10, 64)
	bi, _ := strconv.ParseInt(bm, 10, 64)
	if ai != bi {
		return ai < bi
	}
	an, _ := strconv.ParseInt(as, 10, 64)
	bn, _ := strconv.ParseInt(bs, 10, 64)
	return an < bn
}

// streams are the streams events reads: lifecycle and the output streams.
func (c *ctl) streams(cmd *cobra.Command, only []string) []string {
	ids := only
	out := []string{c.keys.Lifecycle()}
	if len(ids) == 0 {
		ids, _ = c.fleet().Workers(cmd.Context())
		out = append(out, c.keys.DeveloperOutput())
	}
	for _, id := range ids {
		out = append(out, c.keys.Output(id))
	}
	return out
}
