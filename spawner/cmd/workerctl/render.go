package main

// Rendering: everything workerctl prints, as tables for people or JSON
// for scripts. The commands fetch; these functions only format.

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner"
	"github.com/agentvisor/agentvisor/spawner/images"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// shortID is how tables show a worker id: enough to tell workers apart,
// and a prefix every command accepts.
func shortID(id string) string { return id[:min(8, len(id))] }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String()
}

func heartbeatAge(hb *protocol.Heartbeat) string {
	if hb == nil {
		return "-"
	}
	return age(hb.Timestamp) + " ago"
}

func renderWorkers(w io.Writer, rows []workerRow) error {
	tw := table(w)
	fmt.Fprintln(tw, "WORKER\tHOST\tAGENT\tKIND\tSTATUS\tSTATE\tHEALTH\tPROJECT\tTASK\tAGE\tHEARTBEAT")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortID(r.WorkerID), dash(r.Host), r.AgentType, r.Kind,
			r.Status, dash(string(r.State)), dash(string(r.Health)), dash(r.ProjectID), dash(r.RequestID), age(r.CreatedAt), heartbeatAge(r.Heartbeat))
	}
	return tw.Flush()
}

func renderWorker(w io.Writer, r workerRow) error {
	tw := table(w)
	line := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, dash(v)) }
	line("worker", r.WorkerID)
	line("host", r.Host)
	line("agent", string(r.AgentType))
	line("kind", string(r.Kind))
	line("status", string(r.Status))
	line("state", string(r.State))
	line("health", string(r.Health))
	line("project", r.ProjectID)
	line("image", r.Image)
	line("container", r.ContainerID)
	line("task", r.RequestID)
	line("created", age(r.CreatedAt)+" ago")
	if r.ExitCode != nil {
		line("exit code", strconv.Itoa(*r.ExitCode))
	}
	line("error", r.Error)
	if hb := r.Heartbeat; hb != nil {
		line("heartbeat", fmt.Sprintf("%s ago: %s, RSS %.1f MB, CPU %.2f%%, %d tasks done", age(hb.Timestamp), hb.Status,
			float64(hb.RSSBytes)/1e6, hb.CPUPercent, hb.TasksCompleted))
	} else {
		line("heartbeat", "none (paused, stopped, or not started)")
	}
	if err := tw.Flush(); err != nil || len(r.History) == 0 {
		return err
	}
	fmt.Fprintln(w, "\ntransitions (newest first):")
	tw = table(w)
	fmt.Fprintln(tw, "AT\tFROM\tTO\tAFTER\tREASON")
	for _, t := range r.History {
		from, to := string(t.From), string(t.To)
		if t.FromHealth != t.ToHealth {
			from, to = from+"/"+string(t.FromHealth), to+"/"+string(t.ToHealth)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.At.Local().Format(time.TimeOnly), from, to,
			(time.Duration(t.InPreviousMS) * time.Millisecond).String(), t.Reason)
	}
	return tw.Flush()
}

// renderEvent prints one stream entry: a line of the timeline, or the
// entry's document as one JSON line.
func renderEvent(w io.Writer, asJSON bool, ev client.Event) {
	if asJSON {
		if ev.Err != nil {
			b, _ := json.Marshal(map[string]string{"stream": ev.Stream, "id": ev.ID, "error": ev.Err.Error()})
			fmt.Fprintln(w, string(b))
			return
		}
		fmt.Fprintln(w, string(ev.Data))
		return
	}
	ts, _, _ := strings.Cut(ev.ID, "-")
	ms, _ := strconv.ParseInt(ts, 10, 64)
	when := time.UnixMilli(ms).Format("15:04:05.000")
	if ev.Err != nil {
		fmt.Fprintf(w, "%s  %-8s  %-9s %s: %v\n", when, "-", "invalid", ev.Stream, ev.Err)
		return
	}
	id := shortID(ev.WorkerID())
	switch {
	case ev.Lifecycle != nil:
		l := ev.Lifecycle
		fmt.Fprintf(w, "%s  %-8s  lifecycle %-15s %s %s\n", when, id, l.Event, l.Source, l.RequestID)
	case ev.Progress != nil:
		p := ev.Progress
		pct := ""
		if p.ProgressPct != nil {
			pct = fmt.Sprintf(" %d%%", *p.ProgressPct)
		}
		fmt.Fprintf(w, "%s  %-8s  progress  %s %q%s %s\n", when, id, p.RequestID, p.Step, pct, p.Output)
	case ev.Output != nil:
		o := ev.Output
		detail := string(o.Result)
		switch {
		case o.Error != nil:
			detail = string(o.Error.Code) + ": " + o.Error.Message
		case o.Question != "":
			detail = strconv.Quote(o.Question)
		}
		fmt.Fprintf(w, "%s  %-8s  output    %s %s %s\n", when, id, o.RequestID, o.Status, detail)
	case ev.Permission != nil:
		p := ev.Permission
		fmt.Fprintf(w, "%s  %-8s  permission %s %s %s %s\n", when, id, p.RequestID, p.PermissionID, p.Tool, p.Input)
	}
}

func renderOutput(w io.Writer, o protocol.Output) error {
	tw := table(w)
	fmt.Fprintf(tw, "status\t%s\n", o.Status)
	if len(o.Result) > 0 {
		fmt.Fprintf(tw, "result\t%s\n", o.Result)
	}
	if o.Question != "" {
		fmt.Fprintf(tw, "question\t%s\n", o.Question)
	}
	if o.Error != nil {
		fmt.Fprintf(tw, "error\t%s: %s\n", o.Error.Code, o.Error.Message)
	}
	fmt.Fprintf(tw, "session\t%s\n", dash(o.SessionID))
	fmt.Fprintf(tw, "tokens\tin %d, out %d, cache read %d, cache write %d\n", o.Usage.Input, o.Usage.Output, o.Usage.CacheRead, o.Usage.CacheCreation)
	fmt.Fprintf(tw, "cost\t$%.4f\n", o.CostUSD)
	fmt.Fprintf(tw, "duration\t%v\n", time.Duration(o.DurationMS)*time.Millisecond)
	if o.Git != nil {
		renderGit(tw, o.Git)
	}
	return tw.Flush()
}

// renderGit adds a task's git result to an output's table: where the
// work went, its commits and diffstat, whether it merges into the base.
func renderGit(tw io.Writer, g *protocol.GitOutput) {
	pushed := "not pushed"
	switch {
	case g.Discarded:
		pushed = "not pushed: discarded (the task failed)"
	case g.Pushed:
		pushed = "pushed"
	}
	fmt.Fprintf(tw, "git\t%s, branch %s from %s (%s)\n", g.Remote, g.Branch, g.Base, pushed)
	if !g.Changed {
		fmt.Fprintf(tw, "changes\tnone: the branch is as the task found it (%s)\n", short(g.HeadCommit))
		return
	}
	fmt.Fprintf(tw, "commits\t%s..%s, %d\n", short(g.StartCommit), short(g.HeadCommit), len(g.Commits))
	for _, c := range g.Commits {
		fmt.Fprintf(tw, "\t%s %s\n", short(c.SHA), c.Subject)
	}
	fmt.Fprintf(tw, "diffstat\t%d files, +%d -%d\n", len(g.Files), g.Insertions, g.Deletions)
	for _, f := range g.Files {
		if f.Binary {
			fmt.Fprintf(tw, "\t%s (binary)\n", f.Path)
		} else {
			fmt.Fprintf(tw, "\t%s +%d -%d\n", f.Path, f.Insertions, f.Deletions)
		}
	}
	if g.MergesCleanly != nil {
		merge := "merges cleanly into " + g.Base
		if !*g.MergesCleanly {
			merge = "conflicts with " + g.Base + ": " + strings.Join(g.Conflicts, ", ")
		}
		if g.BaseHead != "" {
			merge += " (which moved to " + short(g.BaseHead) + ")"
		}
		fmt.Fprintf(tw, "merge\t%s\n", merge)
	}
	if g.PatchTruncated {
		fmt.Fprintf(tw, "patch\t%d bytes, cut to %d\n", g.PatchBytes, len(g.Patch))
	}
}

// short is a commit's first 12 hex digits.
func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return dash(sha)
}

func renderUsage(w io.Writer, rows []usageRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PROJECT\tTASKS\tINPUT\tOUTPUT\tCACHE_READ\tCACHE_WRITE\tCOST_USD\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.4f\t\n", r.ProjectID, r.Tasks, r.Input, r.Output, r.CacheRead, r.CacheCreation, r.CostUSD)
	}
	return tw.Flush()
}

func renderBudgets(w io.Writer, rows []budgetRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PROJECT\tLIMIT_USD\tWARN_USD\tSPENT_USD\tSTATE\t")
	usd := func(v float64) string {
		if v <= 0 {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4f\t%s\t\n", r.ProjectID, usd(r.LimitUSD), usd(r.WarnUSD), r.SpentUSD, r.State())
	}
	return tw.Flush()
}

func renderVolumes(w io.Writer, vs []spawner.Volume) error {
	tw := table(w)
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

func renderReconcile(w io.Writer, r spawner.ReconcileReport) error {
	tw := table(w)
	for _, l := range []struct {
		k string
		v int
	}{{"containers seen", r.ContainersSeen}, {"workers known", r.WorkersKnown}, {"orphans removed", r.OrphansRemoved},
		{"missing marked", r.MissingMarked}, {"states fixed", r.StatesFixed}, {"started", r.Started},
		{"exited retired", r.Exited}, {"retirements taken over", r.TakenOver}, {"redis users deleted", r.UsersDeleted}} {
		fmt.Fprintf(tw, "%s\t%d\n", l.k, l.v)
	}
	return tw.Flush()
}

func renderGC(w io.Writer, r images.GCReport) error {
	verb := "removed"
	if r.DryRun {
		verb = "would remove"
	}
	tw := table(w)
	fmt.Fprintf(tw, "%s\t%s\n", verb, dash(strings.Join(r.Removed, " ")))
	fmt.Fprintf(tw, "stale but in use\t%s\n", dash(strings.Join(r.KeptInUse, " ")))
	fmt.Fprintf(tw, "recent, kept\t%d\n", r.Kept)
	fmt.Fprintf(tw, "other prefixes' images\t%d\n", r.NotOurs)
	if !r.DryRun {
		fmt.Fprintf(tw, "build cache reclaimed\t%d bytes\n", r.CacheBytes)
	}
	return tw.Flush()
}

func renderManagers(w io.Writer, ms []spawner.ManagerState) error {
	tw := table(w)
	fmt.Fprintln(tw, "MANAGER\tHOST\tPID\tVERSION\tUP\tLAST RECONCILE\tLEASES\tREFRESHED\tMETRICS")
	for _, m := range ms {
		last := "-"
		if !m.LastReconcileAt.IsZero() {
			last = age(m.LastReconcileAt) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Host, m.PID, dash(m.Version), age(m.StartedAt), last,
			dash(strings.Join(m.Leases, ",")), age(m.UpdatedAt)+" ago", dash(m.MetricsAddr))
	}
	return tw.Flush()
}

func renderPools(w io.Writer, ps []spawner.PoolStatus) error {
	tw := table(w)
	fmt.Fprintln(tw, "POOL\tWARM\tALLOCATED\tMEMBERS\tMIN WARM\tMAX\tUTILIZATION\tALLOCATIONS\tWAIT (MEAN)\tREFILLS\tRECYCLES")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.0f%%\t%d\t%.1f ms\t%d\t%d\n", p.Name, p.Warm, p.Allocated, p.Members, p.MinWarm,
			p.MaxTotal, 100*p.Utilization, p.Allocations, p.WaitMeanMS, p.Refills, p.Recycles)
	}
	return tw.Flush()
}
