package worker

import (
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// A task's attempts (the run step of task.go, between admit and finish):
// the first, and, when the task asked for retries and its failure is
// retryable, more, each after its policy's backoff and in the session of
// the one before. A re-run of a coding agent has side effects, so a task
// that did not ask is never run twice here.

// attempts runs the task until an attempt ends well, fails for good, or
// its policy allows no more. The output is the last attempt's, with the
// usage, cost and time of every attempt.
func (t *taskRun) attempts() (protocol.Output, *rdb.TaskUsage) {
	policy, asked := t.task.RetryPolicy(t.ts.retry)
	var (
		resume string
		spent  attemptsSpent
	)
	for {
		outcome, plan, oomBefore := t.execute(resume)
		o, usage := t.output(outcome, plan, oomBefore)
		// Droid's cost is the proxy's meter of the whole task: already the
		// sum of its attempts; so is Claude's when the meter counted more
		// than it reported (spending.estimateCost).
		o, usage = spent.add(o, usage, (!t.ts.caps.ReportsCost && t.cur.spend.isMetered()) || t.cur.spend.isWholeTask())
		if !asked || !t.retryable(o, policy) {
			return o, usage
		}
		next := t.cur.attempt + 1
		t.ts.pub.progress(t.cur, fmt.Sprintf("retrying, attempt %d of %d: %s", next, policy.Attempts, o.Error.Code), protocol.LevelWarning)
		t.log.Warn("task failed: retrying", "attempt", next, "attempts", policy.Attempts, "code", o.Error.Code, "backoff", policy.Backoff(next))
		if !t.backoff(policy.Backoff(next)) {
			return t.stoppedRetrying(o), usage
		}
		t.nextAttempt(next)
		resume = ""
		if t.ts.caps.NoResume == "" {
			resume = o.SessionID
		}
	}
}

// retryable reports whether a failed output of the current attempt is
// retried under policy: a retryable code, attempts left, no cancel, and
// the wrapper's abort (if one ended the attempt) forgotten for the next.
func (t *taskRun) retryable(o protocol.Output, policy protocol.RetryPolicy) bool {
	if o.Status != protocol.StatusFailed || o.Error == nil || !policy.Allows(t.cur.attempt, o.Error.Code) {
		return false
	}
	if t.stop.Err() != nil {
		return false // shutdown began: the failure is the answer
	}
	return t.cur.cancel.rearm()
}

// backoff waits d before the next attempt; false when a cancel came or
// shutdown began meanwhile.
func (t *taskRun) backoff(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.cur.cancel.channel():
		return false
	case <-t.stop.Done():
		return false
	case <-t.ts.terminate.ch:
		return false
	}
}

// stoppedRetrying is the output of a task whose retry did not start: a
// cancel that came during the backoff makes it cancelled; shutdown leaves
// the last attempt's failure.
func (t *taskRun) stoppedRetrying(o protocol.Output) protocol.Output {
	if cancelled, reason, _ := t.cur.cancel.state(); cancelled {
		return t.ts.outputs.cancelled(o, reason, true)
	}
	return o
}

// nextAttempt makes the task's run the next attempt's: the run hash, the
// status hash and the task's timeout say so.
func (t *taskRun) nextAttempt(n int) {
	ts, cur, now := t.ts, t.cur, t.ts.now()
	cur.mu.Lock()
	cur.attempt, cur.deadline = n, now.Add(t.task.Timeout(ts.taskTimeout))
	cur.run.UpdatedAt = now
	cur.mu.Unlock()
	ts.pub.run(cur)
	ts.status.push(map[string]any{protocol.StatusFieldAttempt: n})
}

// retryPlan continues the session of the attempt before.
func retryPlan(plan SessionPlan, sessionID string) SessionPlan {
	plan.ResumeID, plan.Context = sessionID, ""
	plan.Decision = protocol.SessionDecision{Action: protocol.SessionResume, Reason: protocol.SessionReasonRetry, PreviousSessionID: sessionID}
	return plan
}

// attemptsSpent sums what the attempts of a task used.
type attemptsSpent struct {
	usage      protocol.Usage
	costUSD    float64
	durationMS int64
	ran        bool // an attempt's agent started: the task's usage counts
}

// add counts an attempt's output and usage into the task's, and returns
// them with the sums of every attempt so far; cumulative: the output's
// usage and cost are the task's so far already.
func (s *attemptsSpent) add(o protocol.Output, usage *rdb.TaskUsage, cumulative bool) (protocol.Output, *rdb.TaskUsage) {
	if cumulative {
		s.usage, s.costUSD = o.Usage, o.CostUSD
	} else {
		s.usage, s.costUSD = s.usage.Add(o.Usage), s.costUSD+o.CostUSD
	}
	s.durationMS += o.DurationMS
	o.Usage, o.CostUSD, o.DurationMS = s.usage, s.costUSD, s.durationMS
	s.ran = s.ran || usage != nil
	if !s.ran {
		return o, nil
	}
	return o, &rdb.TaskUsage{Project: o.ProjectID, Session: o.SessionID, Worker: o.WorkerID, Usage: o.Usage, CostUSD: o.CostUSD}
}

// isMetered reports whether the proxy metered the task's model calls.
func (sp *taskSpend) isWholeTask() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.wholeTask
}

func (sp *taskSpend) isMetered() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.metered
}
