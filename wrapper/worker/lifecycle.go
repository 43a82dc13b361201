package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/egress"
)

// Run serves tasks until ctx ends, then shuts down. Shutdown order:
//
//  1. ctx ends: no new task starts; stopping is published at once (the
//     status hash and the heartbeat say stopping while a task finishes);
//  2. the task in flight gets the grace (Terminate cuts it short) and its
//     output, usage and session record are stored;
//  3. the persistent agent, if any, is closed;
//  4. stopped is published, the events are flushed, the heartbeat key goes.
func (w *Worker) Run(ctx context.Context) error {
	proxy, err := w.startModelProxy()
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if proxy != nil {
		defer proxy.Close()
	}
	if w.cfg.EgressSocket != "" {
		front, err := egress.Start(w.cfg.EgressSocket, w.egressRefused, w.log)
		if err != nil {
			return fmt.Errorf("worker: egress: %w", err)
		}
		defer front.Close()
		w.cfg.egress = front.Env()
	}
	if err := w.cfg.PrepareWorkspace(w.agent, w.home()); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	p, err := startProgressServer(w, w.cfg.ProgressAddr)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.progress.Store(p)
	defer p.close()

	bg, stopBG := context.WithCancel(context.Background())
	var bgDone sync.WaitGroup
	bgDone.Add(3)
	go func() { defer bgDone.Done(); w.pub.out.Run(bg) }()
	go func() { defer bgDone.Done(); w.heartbeat(bg) }()
	go func() { defer bgDone.Done(); w.followInput(bg) }()
	defer func() { stopBG(); bgDone.Wait() }()

	w.started(p.url)
	defer context.AfterFunc(ctx, w.beginShutdown)()
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	w.stopLoop.Store(&stopLoop)
	w.loop(loopCtx)
	w.beginShutdown() // done already, or waits until done: stopping goes before stopped
	w.wind.settle()
	w.persist.close()
	w.stopped()
	return nil
}

// home is the agent's HOME, from the wrapper's environment.
func (w *Worker) home() string {
	home := ""
	for _, kv := range w.environ {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	return home
}

// started makes the worker idle (its agent started ahead, with
// AGENT_PREWARM) and publishes that it started.
func (w *Worker) started(progressURL string) {
	if w.cfg.Prewarm {
		// Before the worker says it is idle: a warm pool pauses it then,
		// and its agent must be up by then.
		w.prewarm()
	}
	started := w.now()
	w.transition(protocol.WorkerIdle, "started")
	w.pushStatus(map[string]any{protocol.StatusFieldStartedAt: protocol.FormatTime(started),
		protocol.StatusFieldAgentType: string(w.cfg.AgentType), protocol.StatusFieldKind: string(w.cfg.Kind),
		protocol.StatusFieldRequestID: "", protocol.StatusFieldTaskID: "", protocol.StatusFieldError: ""})
	detail := map[string]any{"agent_type": w.cfg.AgentType, "kind": w.cfg.Kind, "progress_url": progressURL}
	if pid := w.persist.pid(); pid > 0 {
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
	w.transition(protocol.WorkerStopped, "shutdown complete")
	done := w.state.snapshot().done
	w.pub.lifecycle(protocol.EventStopped, "", "", map[string]any{"tasks_completed": done})
	flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.pub.out.Flush(flushCtx); err != nil {
		w.log.Warn("shutdown: events not written before the deadline", "pending", w.pub.out.Len())
	}
	_ = w.rdb.Del(flushCtx, w.cfg.Keys.Heartbeat(w.cfg.WorkerID))
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
		w.pushStatus(map[string]any{})
		w.pub.lifecycle(protocol.EventStopping, "", "", nil)
		w.log.Info("stopping: no new tasks", "request_id_in_flight", reqID)
	})
}

// Terminate ends the running agent now (SIGTERM to its group, SIGKILL
// after KILL_GRACE); its task fails with TERMINATED. Safe to call twice.
func (w *Worker) Terminate() { w.terminate.now() }

// terminator ends what runs under its contexts, once.
type terminator struct {
	once sync.Once
	ch   chan struct{}
}

func newTerminator() *terminator { return &terminator{ch: make(chan struct{})} }

func (t *terminator) now() { t.once.Do(func() { close(t.ch) }) }

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
	now := w.now()
	msg := w.redact.Redact(cause.Error())
	_ = w.rdb.HSet(ctx, w.cfg.Keys.Status(w.cfg.WorkerID), map[string]any{
		protocol.StatusFieldState: string(protocol.WorkerFailed), protocol.StatusFieldError: msg,
		protocol.StatusFieldExitCode: exitCode, protocol.StatusFieldUpdatedAt: protocol.FormatTime(now)})
	l := protocol.Lifecycle{WorkerID: w.cfg.WorkerID, Event: protocol.EventFailed, Source: protocol.SourceWrapper,
		Timestamp: now, Detail: map[string]any{"error": msg, "exit_code": exitCode}, Host: w.cfg.Host}
	if doc, err := l.Encode(); err == nil {
		_ = w.rdb.XAdd(ctx, w.cfg.Keys.Lifecycle(), doc)
	}
}

// transition moves the worker's state machine and writes the status hash.
func (w *Worker) transition(to protocol.WorkerState, reason string) {
	if err := w.state.transition(to, reason); err != nil {
		w.log.Error("worker state", "err", err)
		return
	}
	w.pushStatus(map[string]any{})
}

// pushStatus writes fields of the status hash, with the worker's state,
// health and since when.
func (w *Worker) pushStatus(fields map[string]any) {
	w.pub.status(stateFields(w.state.snapshot(), fields))
}

// requestPause asks the spawner to pause this worker, now idle: the
// wrapper never pauses itself. reason says what it just did.
func (w *Worker) requestPause(reqID, taskID, reason string) {
	if !w.cfg.PauseAfterOutput || w.state.snapshot().stopping {
		return
	}
	c := protocol.Control{Action: protocol.ControlPause, WorkerID: w.cfg.WorkerID,
		Reason: reason, RequestID: reqID, Timestamp: w.now()}
	doc, err := c.Encode()
	if err != nil {
		return
	}
	w.pub.entry("control pause", w.cfg.Keys.Control(), doc)
	w.pub.lifecycle(protocol.EventPauseRequested, reqID, taskID, map[string]any{"reason": c.Reason})
}
