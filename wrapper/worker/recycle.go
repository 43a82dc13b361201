package worker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// recycle ends the persistent process after its task when it served
// AGENT_RECYCLE_TASKS tasks or its process group's resident memory passed
// AGENT_RECYCLE_RSS: a long-lived agent process grows (its context, caches,
// leaks), and a new one resuming the same session costs one cold start.
// The next task starts it.
func (p *persistentAgent) recycle() {
	if p.proc == nil || !p.proc.Alive() {
		return
	}
	reason := ""
	if p.recycleTasks > 0 && p.tasks >= p.recycleTasks {
		reason = "tasks"
	} else if p.recycleRSS > 0 {
		if rss := groupRSS(p.proc.Pid()); rss >= p.recycleRSS {
			reason = "rss"
		}
	}
	if reason == "" {
		return
	}
	p.log.Info("recycling the persistent agent", "reason", reason, "tasks", p.tasks, "pid", p.proc.Pid())
	p.proc.Close()
	p.proc = nil
}

// groupRSS sums the resident memory (bytes) of the processes of process
// group pgid, from /proc.
func groupRSS(pgid int) int64 {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var sum int64
	page := int64(os.Getpagesize())
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 22 {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g != pgid {
			continue
		}
		rss, _ := strconv.ParseInt(fields[21], 10, 64) // field 24 of stat: rss in pages
		sum += rss * page
	}
	return sum
}
