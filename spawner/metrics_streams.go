package spawner

import (
	"context"
	"strings"
	"time"

	"github.com/agentvisor/agentvisor/client"
	"github.com/agentvisor/agentvisor/protocol"
)

// streamMetrics reads the lifecycle stream and the output streams (as a
// Watcher: no consumer group, from the moment it starts) and counts what
// the workers report.
type streamMetrics struct {
	job
	*env
	m *Metrics
}

func (sm *streamMetrics) Start(ctx context.Context) { sm.start(ctx, sm.run) }

func (sm *streamMetrics) run(ctx context.Context) {
	died := map[string]time.Time{} // worker → its died/oom event; owned by this loop
	w := sm.rdb.Watcher()
	for ctx.Err() == nil {
		err := w.Run(ctx, func(ev client.Event) { sm.count(ev, died) })
		if err != nil && ctx.Err() == nil {
			sm.log.Warn("metrics: reading the streams", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	var n int64
	for _, c := range ms {
		n = n*10 + int64(c-'0')
	}
	return time.UnixMilli(n)
}

func (sm *streamMetrics) count(ev client.Event, died map[string]time.Time) {
	m := sm.m
	switch {
	case ev.Lifecycle != nil:
		l := ev.Lifecycle
		if !protocol.Event(l.Event).Valid() {
			return
		}
		m.lifecycle.WithLabelValues(string(l.Event)).Inc()
		switch l.Event {
		case protocol.EventDied, protocol.EventOOM:
			if _, ok := died[l.WorkerID]; !ok {
				died[l.WorkerID] = entryTime(ev.ID)
			}
		case protocol.EventDegraded, protocol.EventDead:
			m.heartbeatsMiss.WithLabelValues(string(l.Event)).Inc()
		case protocol.EventStateChanged:
			m.stateChanged(l.Detail)
		case protocol.EventUsage:
			// Model calls outside any output: counted as the project's
			// usage counters and budgets count them.
			p, _ := l.Detail["project_id"].(string)
			n := func(k string) int64 { v, _ := l.Detail[k].(float64); return int64(v) }
			c, _ := l.Detail["cost_usd"].(float64)
			m.addUsage(p, protocol.Usage{Input: n("input"), Output: n("output"), CacheRead: n("cache_read"), CacheCreation: n("cache_creation")}, c)
		case protocol.EventRemoved:
			delete(died, l.WorkerID)
		}
	case ev.Progress != nil && ev.Progress.Refused != nil:
		m.refusals.WithLabelValues(refusalKind(ev.Progress.Refused.Tool)).Inc()
	case ev.Output != nil:
		o := ev.Output
		agent := string(o.AgentType)
		if !o.AgentType.Valid() {
			agent = "unknown"
		}
		code := ""
		if o.Error != nil {
			code = string(o.Error.Code)
		}
		m.tasks.WithLabelValues(agent, string(o.Status), code).Inc()
		m.taskSeconds.WithLabelValues(agent, string(o.Status)).Observe(float64(o.DurationMS) / 1000)
		m.addUsage(o.ProjectID, o.Usage, o.CostUSD)
		if code == string(protocol.CodeResumeFailed) {
			m.resumeFailures.Inc()
		}
		if o.Session != nil {
			m.sessions.WithLabelValues(sessionReason(o.Session.Reason)).Inc()
		}
		if t, ok := died[o.WorkerID]; ok && o.Status == protocol.StatusFailed {
			m.crashToOutput.Observe(max(entryTime(ev.ID).Sub(t).Seconds(), 0))
			delete(died, o.WorkerID)
		}
	}
}

// sessionReason is the metrics' label of a session decision's reason:
// the protocol's set, other for any other.
func sessionReason(r string) string {
	switch r {
	case protocol.SessionReasonNoSession, protocol.SessionReasonContinued, protocol.SessionReasonForced, protocol.SessionReasonOverflow,
		protocol.SessionReasonStale, protocol.SessionReasonResumeFailed, protocol.SessionReasonReset, protocol.SessionReasonHeld,
		protocol.SessionReasonAnswers, protocol.SessionReasonRetry:
		return r
	}
	return "other"
}

// refusalKind is the metrics' kind of a refusal of tool: a bounded set.
func refusalKind(tool string) string {
	switch tool {
	case protocol.RefusedToolNetwork, protocol.RefusedToolProgress, protocol.RefusedToolModel, protocol.RefusedToolConnections:
		return tool
	}
	return "command"
}

// addUsage counts a project's tokens and cost (a negative figure, which
// no wrapper writes, counts as none: a counter only grows).
func (m *Metrics) addUsage(project string, u protocol.Usage, cost float64) {
	p := m.project(project)
	m.tokens.WithLabelValues(p, "input").Add(float64(max(u.Input, 0)))
	m.tokens.WithLabelValues(p, "output").Add(float64(max(u.Output, 0)))
	m.tokens.WithLabelValues(p, "cache_read").Add(float64(max(u.CacheRead, 0)))
	m.tokens.WithLabelValues(p, "cache_creation").Add(float64(max(u.CacheCreation, 0)))
	m.cost.WithLabelValues(p).Add(max(cost, 0))
}
