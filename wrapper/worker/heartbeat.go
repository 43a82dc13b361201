package worker

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// heartbeater rewrites the worker's heartbeat key every interval, with a
// TTL of protocol.HeartbeatTTLIntervals intervals: the spawner's proof
// that the worker lives. The first beat makes the worker healthy; a
// degraded worker whose cool-down passed checks its health with a round
// trip of the beat.
type heartbeater struct {
	heartbeaterParams
}

// heartbeaterParams are what the heartbeater is built from: its
// collaborators and settings, none of them the Worker.
type heartbeaterParams struct {
	rdb      heartbeatRedis
	key      string
	interval time.Duration
	cooldown time.Duration // a degraded worker's, before its health check
	workerID string
	state    *workerState
	status   *statusReporter
	log      *slog.Logger
	now      func() time.Time
}

func newHeartbeater(p heartbeaterParams) *heartbeater { return &heartbeater{heartbeaterParams: p} }

// heartbeatRedis is what the heartbeater calls: its key, and its removal
// at the end.
type heartbeatRedis interface {
	rdb.Heartbeats
	Del(ctx context.Context, keys ...string) error
}

// run beats until ctx ends. A failed write is not retried: the next beat
// is the retry, so beats resume as soon as Redis is back.
func (h *heartbeater) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	var cpu cpuSampler
	for {
		hb := h.doc(&cpu)
		if doc, err := hb.Encode(); err == nil {
			ttl := time.Duration(protocol.HeartbeatTTLIntervals) * h.interval
			// After Redis comes back, the pool's idle connections are dead:
			// each failed write drops one, so a few tries in a row reach a
			// fresh connection within this beat instead of one per beat.
			for try := 0; try < 3; try++ {
				err := h.rdb.SetEx(ctx, h.key, doc, ttl)
				if err == nil {
					h.beaten(ctx, doc)
				}
				if err == nil || ctx.Err() != nil || rdb.IsServerError(err) {
					break
				}
				h.log.Debug("heartbeat not written", "err", err, "try", try+1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beaten runs after each heartbeat written (doc): the first makes the
// worker healthy; a degraded worker whose cool-down passed checks its
// health with a round trip (the beat read back as written) and is healthy
// again when it passes.
func (h *heartbeater) beaten(ctx context.Context, doc []byte) {
	if h.state.beat() {
		h.status.push(map[string]any{})
	}
	if h.state.healthCheckDue(h.cooldown) {
		got, err := h.rdb.Get(ctx, h.key)
		if err == nil && bytes.Equal(got, doc) && h.state.healthCheckPassed("heartbeat round trip after the cool-down") {
			h.status.push(map[string]any{})
		}
	}
	h.status.markIdle()
}

// remove deletes the heartbeat key: the worker stopped.
func (h *heartbeater) remove(ctx context.Context) { _ = h.rdb.Del(ctx, h.key) }

func (h *heartbeater) doc(cpu *cpuSampler) protocol.Heartbeat {
	s := h.state.snapshot()
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
		WorkerID: h.workerID, Status: status, RequestID: reqID, TaskID: taskID,
		RSSBytes: rss, CPUPercent: cpu.sample(agentPID), TasksCompleted: done,
		IntervalMS: h.interval.Milliseconds(), Timestamp: h.now(),
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
