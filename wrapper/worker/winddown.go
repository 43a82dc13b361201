package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// A cancel is answered as soon as the agent was told to stop, not when it
// is done stopping. What a resume needs is on disk by then: the agent
// wrote the task's prompt into its session when its turn began (its init
// line said which session), and the interrupted agent goes on saving its
// turn (Claude: the interrupted turn and its error result; then the
// process per task exits, the persistent one waits for the next message)
// in the background, a wind-down bounded by the interrupt's grace and
// KILL_GRACE. Under a container's CPU limit that takes hundreds of ms the
// consumer no longer waits for. The next agent run (a task's, or the
// wrapper's own summary turn) and the worker's shutdown wait for the
// wind-down to end first, so no two runs ever touch a session at once.

// windDown is the agent run of a cancelled task that goes on after the
// task's output. The task loop's goroutine owns it.
type windDown struct {
	done chan struct{} // closed when the run ended; nil while none ran
}

// settle waits for the wind-down in progress, if any, to end.
func (d *windDown) settle() {
	if d.done != nil {
		<-d.done
		d.done = nil
	}
}

// followed is what a run's events told so far, for an outcome made before
// the run ends.
type followed struct {
	start  time.Time
	inited chan struct{} // closed at the first init line

	mu       sync.Mutex // guards the fields below
	out      agent.Outcome
	detached bool // the task's outcome was made: later events are not the task's
}

func newFollowed() *followed { return &followed{start: time.Now(), inited: make(chan struct{})} }

// see records ev, and reports whether it still belongs to the task.
func (f *followed) see(ev agent.Event) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.detached {
		return false
	}
	if ev.Init != nil && f.out.Init == nil {
		close(f.inited)
	}
	f.out.Record(ev, time.Since(f.start))
	return true
}

// detach makes the outcome of a run interrupted by a cancel, from what it
// told so far, when its session is known (its init line came): later
// events are not the task's. ok is false when the session is not known
// yet, nothing changed.
func (f *followed) detach() (o agent.Outcome, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.out.Init == nil {
		return o, false
	}
	f.detached = true
	o = f.out
	o.Result, o.Interrupted, o.Duration = nil, true, time.Since(f.start)
	return o, true
}

// agentRun is a task's agent run on a goroutine of its own: its outcome,
// or the panic that ended it, once done closed.
type agentRun struct {
	done     chan struct{}
	o        agent.Outcome
	panicked any
}

// taskPanic is a panic of a task's agent run, raised again on the task's
// goroutine, where the task boundary (recover.go) answers it.
type taskPanic struct{ value any }

func (p taskPanic) String() string { return fmt.Sprint(p.value) }

// cancellable runs the task's agent (run) and returns its
// outcome; or, once a cancel interrupted it after its session was known,
// an interrupted outcome at once and the channel that closes when the
// run, winding down in the background (w.wind), ended.
func (w *agentRunner) cancellable(ctx context.Context, task protocol.Task, plan SessionPlan, cur *current, spec agent.Spec) (agent.Outcome, <-chan struct{}) {
	w.wind.settle()
	f := newFollowed()
	onEvent := spec.OnEvent
	spec.OnEvent = func(ev agent.Event) {
		if f.see(ev) && onEvent != nil {
			onEvent(ev)
		}
	}
	run := &agentRun{done: make(chan struct{})}
	go func() {
		defer close(run.done)
		defer func() {
			if p := recover(); p != nil {
				w.log.Error("the agent run panicked", "request_id", task.RequestID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				run.panicked = p
			}
		}()
		run.o = w.run(ctx, task, plan, cur, spec)
	}()
	// A cancel that came before the init line waits for it: until then
	// the session is not known, nor is it the project's.
	interrupt, inited := spec.Interrupt, (<-chan struct{})(nil)
	for {
		select {
		case <-run.done:
			if run.panicked != nil {
				panic(taskPanic{run.panicked})
			}
			return run.o, nil
		case <-interrupt:
			interrupt = nil
			if cancelled, _, _ := cur.cancel.state(); cancelled {
				inited = f.inited
				// The task's tool commands stop now, not when the agent is
				// done winding down: the agent itself is spared.
				w.sweep(task, f.start, "cancel")
			} // else the wrapper's own abort: its outcome is awaited
		case <-inited:
			inited = nil
			if early, ok := f.detach(); ok {
				w.wind.done = run.done
				release := w.spend.windingDown(cur) // its calls are still the task's
				go func() {
					defer release()
					w.windDownEnded(task, early, run, time.Now())
				}()
				return early, run.done
			}
		}
	}
}

// windDownEnded waits for the end of a cancelled task's run, and adds to
// the usage counters what its agent reported beyond the task's output
// (early: the outcome the output was made of). Claude's interrupted
// result sums the task's calls with their cost, which the output could
// not wait for.
func (w *agentRunner) windDownEnded(task protocol.Task, early agent.Outcome, run *agentRun, since time.Time) {
	<-run.done
	w.log.Info("cancelled task's agent wound down", "request_id", task.RequestID, "after_output_ms", time.Since(since).Milliseconds())
	if run.panicked != nil || !w.agent.Caps().ReportsCost { // (else the proxy metered its calls, with the task)
		return
	}
	eu, ec := taskUsage(early)
	fu, fc := taskUsage(run.o)
	more := protocol.Usage{Input: fu.Input - eu.Input, Output: fu.Output - eu.Output,
		CacheRead: fu.CacheRead - eu.CacheRead, CacheCreation: fu.CacheCreation - eu.CacheCreation}
	if more.Input < 0 || more.Output < 0 || more.CacheRead < 0 || more.CacheCreation < 0 || fc < ec ||
		(more == protocol.Usage{} && fc == ec) {
		return
	}
	u := rdb.TaskUsage{Project: task.Project(), Session: early.Init.SessionID, Worker: w.workerID, Usage: more, CostUSD: fc - ec}
	if err := w.countUsage(u, task.RequestID, "wind_down"); err != nil {
		w.log.Warn("the usage a cancelled task's agent reported after its output is not counted", "request_id", task.RequestID, "err", err)
	}
}
