package spawner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/engine"
)

// Crashes follows the engine's events for this spawner's containers: a
// worker whose container dies is retired (its tasks answered, the cause
// classified), and pause and unpause keep the status hashes right. When
// the event stream breaks (an engine restart) it reconnects and first
// retires the members whose container exited meanwhile. Every manager
// runs it for its own engine; the retirement's first step decides, once,
// who handles a death.
type Crashes struct {
	job
	crashesParams
	retires sync.WaitGroup
}

// crashesParams is what Crashes is built from.
type crashesParams struct {
	*env
	engine  engine.Engine
	workers retirer
}

func newCrashes(p crashesParams) *Crashes { return &Crashes{crashesParams: p} }

// Start follows events until Stop.
func (c *Crashes) Start(ctx context.Context) { c.start(ctx, c.run) }

// Stop stops following events and waits for the retirements it began.
func (c *Crashes) Stop() {
	c.job.Stop()
	c.retires.Wait()
}

func (c *Crashes) run(ctx context.Context) {
	retry := newRetry()
	for ctx.Err() == nil {
		since := time.Now()
		c.exitedMeanwhile(ctx)
		evs, errs := c.engine.Watch(ctx, since)
		oom := map[string]bool{}
	read:
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-errs:
				if ctx.Err() == nil {
					c.log.Warn("engine event stream broke; reconnecting", "err", err)
					sleepCtx(ctx, retry.NextBackOff())
				}
				break read
			case ev := <-evs:
				retry.Reset()
				id := ev.Worker
				switch ev.Kind {
				case engine.EventOOM:
					oom[id] = true
					c.lifecycle(ctx, id, protocol.EventOOM, nil)
				case engine.EventDied:
					code := ev.ExitCode
					c.retires.Add(1)
					go func(oom bool) { defer c.retires.Done(); retireDied(ctx, c.env, c.workers, id, code, oom) }(oom[id])
					delete(oom, id)
				case engine.EventSuspended:
					c.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerPaused)})
				case engine.EventResumed:
					c.writeStatus(ctx, id, map[string]any{protocol.StatusFieldContainer: string(protocol.ContainerRunning)})
				}
			}
		}
	}
}

// exitedMeanwhile retires every member whose container exited while no
// event reached this manager.
func (c *Crashes) exitedMeanwhile(ctx context.Context) {
	cs, err := c.engine.List(ctx, engine.Filter{State: engine.Exited})
	if err != nil {
		return
	}
	for _, ct := range cs {
		id := ct.Worker
		if member, err := c.rdb.IsWorker(ctx, id); id == "" || err != nil || !member {
			continue
		}
		insp, err := c.engine.Inspect(ctx, ct.ID)
		if err != nil {
			continue
		}
		retireDied(ctx, c.env, c.workers, id, insp.ExitCode, insp.OOMKilled)
	}
}

// retireDied retires a member whose container ended on its own.
func retireDied(ctx context.Context, s *env, w retirer, id string, exitCode int, oom bool) {
	if member, err := s.rdb.IsWorker(ctx, id); err != nil || !member {
		return // retired on purpose (its container stopped by retire), or already handled
	}
	r := retirement{reason: protocol.RemovedDied, died: true, exitCode: exitCode, oom: oom, unasked: true}
	r.code, r.msg = classify(exitCode, oom)
	if req, _ := s.rdb.StatusField(ctx, id, protocol.StatusFieldRequestID); exitCode == 0 && !oom && req == "" {
		// A clean exit with no task in flight (stopped from outside): an
		// end, not a crash.
		r = retirement{reason: protocol.RemovedExited, code: protocol.CodeTerminated, msg: "the worker exited before it ran this task", unasked: true}
	}
	if _, err := w.retire(ctx, id, r); err != nil {
		s.log.Warn("retire a worker that died", "worker_id", id, "err", err)
	}
}

// classify says why a container ended. 137 alone is no proof of OOM: only
// an oom event or the engine's OOMKilled flag is.
func classify(exitCode int, oom bool) (protocol.Code, string) {
	switch {
	case oom:
		return protocol.CodeOOMKilled, fmt.Sprintf("the container was killed by the OOM killer (exit code %d)", exitCode)
	case exitCode == 137:
		return protocol.CodeKilled, "the container was killed (SIGKILL, exit code 137)"
	case exitCode == 143:
		return protocol.CodeTerminated, "the container was terminated (SIGTERM, exit code 143)"
	case exitCode == 0:
		return protocol.CodeAgentCrashed, "the worker exited (exit code 0) with a task in flight"
	}
	return protocol.CodeAgentCrashed, fmt.Sprintf("the worker crashed (exit code %d)", exitCode)
}
