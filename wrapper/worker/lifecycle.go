package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/gateway"
	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/egress"
)

// Run serves tasks until ctx ends, then shuts down. Shutdown order:
//
//  1. ctx ends: no new task starts; stopping is published at once (the
//     status hash and the heartbeat say stopping while a task finishes);
//  2. the task in flight gets the grace (Terminate cuts it short) and its
//     output, usage and session record are stored (retried until
//     finalGrace after Terminate: publisher.go);
//  3. a cancelled task's wind-down ends, the persistent agent, if any, is
//     closed;
//  4. stopped is published, the events are flushed, the heartbeat key goes;
//  5. the background loops (outbox, heartbeat, input follower) stop.
func (w *Worker) Run(ctx context.Context) error {
	stop, err := w.startFrame()
	defer stop()
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}

	// The background loops outlive ctx on purpose: the outbox, the
	// heartbeat and the follower serve the task's grace and the last
	// events; they stop (stopBG) once stopped is published.
	bg, stopBG := context.WithCancel(context.Background())
	var bgDone sync.WaitGroup
	for _, loop := range []func(context.Context){w.pub.out.Run, w.beat.run, w.input.follow} {
		bgDone.Add(1)
		go func() { defer bgDone.Done(); loop(bg) }()
	}
	defer func() { stopBG(); bgDone.Wait() }()

	w.started()
	defer context.AfterFunc(ctx, w.beginShutdown)()
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	w.adopter.stopLoop.Store(&stopLoop)
	w.input.loop(loopCtx)
	w.beginShutdown() // done already, or waits until done: stopping goes before stopped
	w.agents.close()
	w.stopped()
	return nil
}

// startFrame starts what the agent runs in: the model API proxy, the
// egress front, the workspace, the progress endpoint. stop ends them.
func (w *Worker) startFrame() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	proxy, model, err := startModelProxy(modelProxyParams{agent: w.agent, getenv: envLookup(w.environ), log: w.log, heal: w.heal,
		spend: w.spend, redact: w.redact, socket: w.cfg.ModelSocket, socketToken: w.cfg.ModelSocketToken})
	if err != nil {
		return stop, err
	}
	if proxy != nil {
		stops = append(stops, func() { proxy.Close() })
		w.cfg.model = model
	}
	if w.cfg.EgressSocket != "" {
		front, err := egress.Start(w.cfg.EgressSocket, w.log)
		if err != nil {
			return stop, fmt.Errorf("egress: %w", err)
		}
		stops = append(stops, func() { front.Close() })
		w.cfg.egress = front.Env()
		if w.cfg.ModelSocketToken != "" {
			refusals := egress.WatchRefusals(w.cfg.EgressSocket, w.cfg.ModelSocketToken, w.gatewayRefused, w.log)
			stops = append(stops, refusals.Stop)
		}
	}
	if err := w.cfg.PrepareWorkspace(w.agent, homeOf(w.environ)); err != nil {
		return stop, err
	}
	p, err := startProgressServer(progressParams{addr: w.cfg.ProgressAddr, workerID: w.cfg.WorkerID, allowed: w.cfg.AllowedCommands,
		state: w.state, pub: w.pub, redact: w.redact, now: w.now})
	if err != nil {
		return stop, err
	}
	w.progress.Store(p)
	stops = append(stops, p.close)
	return stop, nil
}

// maxRefusalsPerPage bounds the warnings one page of the gateway's
// refusal log becomes: past it, one more warning says how many were not
// published one by one (an agent refused in a loop fills no stream).
const maxRefusalsPerPage = 32

// gatewayRefused publishes what the gateway refused the worker (on any
// of its sockets, whoever in the container called) as warnings of the
// task in flight. Outside a task they are logged only: no consumer
// waits on the worker then.
func (w *Worker) gatewayRefused(p gateway.RefusalPage) {
	cur := w.state.snapshot().cur
	for i, r := range p.Refusals {
		if i == maxRefusalsPerPage {
			break
		}
		w.log.Warn("the gateway refused", "socket", r.Socket, "tool", r.Tool, "code", r.Code, "host", r.Host, "port", r.Port, "in_task", cur != nil)
		if cur != nil {
			w.pub.gatewayRefusal(cur, r)
		}
	}
	more := p.Dropped + uint64(max(len(p.Refusals)-maxRefusalsPerPage, 0))
	if more > 0 {
		w.log.Warn("the gateway refused more than is published one by one", "more", more)
		if cur != nil {
			last := p.Refusals[len(p.Refusals)-1]
			last.Request, last.Reason = "", fmt.Sprintf("%d more refusals of the gateway, not published one by one", more)
			w.pub.gatewayRefusal(cur, last)
		}
	}
}

// homeOf is the agent's HOME, from the wrapper's environment.
func homeOf(environ []string) string {
	home := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	return home
}

// started makes the worker idle (its agent started ahead, with
// AGENT_PREWARM) and publishes that it started.
func (w *Worker) started() {
	progressURL := w.ProgressURL()
	if w.cfg.Prewarm {
		// Before the worker says it is idle: a warm pool pauses it then,
		// and its agent must be up by then.
		w.agents.prewarm()
	}
	started := w.now()
	w.status.transition(protocol.WorkerIdle, "started")
	w.status.push(map[string]any{protocol.StatusFieldStartedAt: protocol.FormatTime(started),
		protocol.StatusFieldAgentType: string(w.cfg.AgentType), protocol.StatusFieldKind: string(w.cfg.Kind),
		protocol.StatusFieldRequestID: "", protocol.StatusFieldTaskID: "", protocol.StatusFieldError: ""})
	detail := map[string]any{"agent_type": w.cfg.AgentType, "kind": w.cfg.Kind, "progress_url": progressURL}
	if pid := w.agents.persist.pid(); pid > 0 {
		detail["agent_pid"] = pid // started ahead (AGENT_PREWARM)
	}
	w.pub.lifecycle(protocol.EventStarted, "", "", detail)
	if w.cfg.Approval && !w.agent.Caps().Approvals {
		w.log.Warn("AGENT_APPROVAL: this " + w.agent.Name() + " worker asks for no approval; it refuses what ALLOWED_COMMANDS does not allow, as without it")
	}
	w.log.Info("worker started", "agent_type", w.cfg.AgentType, "kind", w.cfg.Kind,
		"input", w.cfg.Keys.InputFor(w.cfg.Kind, w.cfg.WorkerID), "progress_url", progressURL)
}

// stopped publishes that the worker stopped, flushes the events and
// removes the heartbeat key.
func (w *Worker) stopped() {
	w.status.transition(protocol.WorkerStopped, "shutdown complete")
	done := w.state.snapshot().done
	w.pub.lifecycle(protocol.EventStopped, "", "", map[string]any{"tasks_completed": done})
	flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.pub.out.Flush(flushCtx); err != nil {
		w.log.Warn("shutdown: events not written before the deadline", "pending", w.pub.out.Len())
	}
	w.beat.remove(flushCtx)
	w.log.Info("worker stopped", "tasks_completed", done, "events_dropped", w.pub.out.Dropped())
}

// beginShutdown marks the worker stopping, so that no task starts any
// more, and publishes it at once, while a task may still run its grace.
// It runs once; a second caller waits until the first is done.
func (w *Worker) beginShutdown() {
	w.shutdownOnce.Do(func() {
		reqID, err := w.state.stop()
		if err != nil {
			w.log.Error("worker state", "err", err)
		}
		w.status.push(map[string]any{})
		w.pub.lifecycle(protocol.EventStopping, "", "", nil)
		w.log.Info("stopping: no new tasks", "request_id_in_flight", reqID)
	})
}

// Terminate ends the running agent now (SIGTERM to its group, SIGKILL
// after KILL_GRACE); its task fails with TERMINATED. Safe to call twice.
// The writes that must not be lost get finalGrace more (publisher.go).
func (w *Worker) Terminate() { w.terminate.now() }

// finalGrace is how long after Terminate the writes that must not be
// lost (a task's output) are retried: the agent's KILL_GRACE to end, and
// finalStoreGrace more for its output. The manager's engine stops a
// container SHUTDOWN_GRACE + 10 s after SIGTERM; with the defaults this
// ends 1 s before that.
func finalGrace(killGrace time.Duration) time.Duration { return killGrace + finalStoreGrace }

// finalStoreGrace is the time an output's store gets after the agent's
// KILL_GRACE, once Terminate was called.
const finalStoreGrace = 4 * time.Second

// terminator ends what runs under its contexts, once; and, grace after
// that, the final context (the publisher's writes that must not be lost).
type terminator struct {
	once     sync.Once
	ch       chan struct{}
	grace    time.Duration
	final    context.Context
	endFinal context.CancelFunc
}

func newTerminator(grace time.Duration) *terminator {
	// Not of Run's ctx, on purpose: the writes it bounds outlive the
	// shutdown's start, and end grace after Terminate (or at Close).
	final, endFinal := context.WithCancel(context.Background())
	return &terminator{ch: make(chan struct{}), grace: grace, final: final, endFinal: endFinal}
}

func (t *terminator) now() {
	t.once.Do(func() {
		close(t.ch)
		time.AfterFunc(t.grace, t.endFinal)
	})
}

// context returns a context of parent that Terminate also ends: what an
// agent runs under, so that shutdown gives it the grace and Terminate
// stops it.
func (t *terminator) context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-t.ch:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// ForwardSignal sends sig to the running agent's process group, if any.
func (w *Worker) ForwardSignal(sig syscall.Signal) {
	if cur := w.state.current(); cur != nil {
		if pid := cur.pid(); pid > 0 {
			_ = syscall.Kill(-pid, sig)
		}
	}
}

// Fail records that the wrapper cannot work (status failed, a failed
// lifecycle event), as far as Redis answers within timeout.
func (w *Worker) Fail(cause error, exitCode int, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	w.pub.failed(ctx, cause, exitCode)
}
