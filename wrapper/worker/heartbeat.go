package worker

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// heartbeat rewrites the heartbeat key every interval, with a TTL of
// protocol.HeartbeatTTLIntervals intervals, until ctx ends. A failed write
// is not retried: the next beat is the retry, so beats resume as soon as
// Redis is back.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	var cpu cpuSampler
	for {
		hb := w.heartbeatDoc(&cpu)
		if doc, err := hb.Encode(); err == nil {
			ttl := time.Duration(protocol.HeartbeatTTLIntervals) * w.cfg.HeartbeatInterval
			// After Redis comes back, the pool's idle connections are dead:
			// each failed write drops one, so a few tries in a row reach a
			// fresh connection within this beat instead of one per beat.
			key := w.cfg.Keys.Heartbeat(w.cfg.WorkerID)
			for try := 0; try < 3; try++ {
				err := w.rdb.SetEx(ctx, key, doc, ttl)
				if err == nil {
					w.beaten(ctx, key, doc)
				}
				if err == nil || ctx.Err() != nil || rdb.IsServerError(err) {
					break
				}
				w.log.Debug("heartbeat not written", "err", err, "try", try+1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) heartbeatDoc(cpu *cpuSampler) protocol.Heartbeat {
	s := w.state.snapshot()
	status := protocol.HeartbeatIdle
	var reqID, taskID string
	agentPID := 0
	if s.stopping {
		status = protocol.HeartbeatStopping
	}
	if s.cur != nil {
		if !s.stopping {
			status = protocol.HeartbeatBusy
		}
		reqID, taskID, agentPID = s.cur.task.RequestID, s.cur.task.TaskID, s.cur.pid()
	}
	done := s.done
	rss := rssBytes("self")
	if agentPID > 0 {
		rss += rssBytes(strconv.Itoa(agentPID))
	}
	return protocol.Heartbeat{
		WorkerID: w.cfg.WorkerID, Status: status, RequestID: reqID, TaskID: taskID,
		RSSBytes: rss, CPUPercent: cpu.sample(agentPID), TasksCompleted: done,
		IntervalMS: w.cfg.HeartbeatInterval.Milliseconds(), Timestamp: w.now(),
	}
}

var pageSize = int64(os.Getpagesize())

// rssBytes reads the resident set of a process from /proc/<pid>/statm.
func rssBytes(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * pageSize
}

// cpuTicks returns utime+stime (+ cutime+cstime when children) of a
// process, in clock ticks.
func cpuTicks(pid string, children bool) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 15 {
		return 0
	}
	sum := int64(0)
	idx := []int{11, 12} // utime, stime (fields 14 and 15 of stat)
	if children {
		idx = append(idx, 13, 14) // cutime, cstime
	}
	for _, i := range idx {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		sum += n
	}
	return sum
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// cpuSampler turns CPU tick counts into a percentage of one core since the
// previous sample.
type cpuSampler struct {
	last     time.Time
	lastTick int64
}

func (c *cpuSampler) sample(agentPID int) float64 {
	now := time.Now()
	ticks := cpuTicks("self", true)
	if agentPID > 0 {
		ticks += cpuTicks(strconv.Itoa(agentPID), true)
	}
	defer func() { c.last, c.lastTick = now, ticks }()
	if c.last.IsZero() || ticks < c.lastTick {
		return 0
	}
	secs := now.Sub(c.last).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(ticks-c.lastTick) / clockTicks / secs * 100
}
