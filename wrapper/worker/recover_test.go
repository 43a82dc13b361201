package worker

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/agent"
)

// panicOnce is a process starter that panics the first time: a bug that
// some agent output or entry reaches in the handling of one task.
type panicOnce struct{ done atomic.Bool }

func (p *panicOnce) Start(cmd *exec.Cmd) (<-chan agent.ExitStatus, error) {
	if p.done.CompareAndSwap(false, true) {
		var m map[string]int
		m["boom"]++ // a nil map write: a runtime panic, as a real bug gives
	}
	return agent.DirectStarter{}.Start(cmd)
}

// A panic in the handling of one task ends that task, not PID 1: it is
// answered failed INTERNAL_ERROR (not retryable), its entry acknowledged,
// and the worker serves the next task with its heartbeat still beating.
func TestPanicInATaskEndsTheTaskNotTheWorker(t *testing.T) {
	e := newEnv(t, protocol.AgentClaude, protocol.KindLongLived)
	w, err := New(e.cfg, Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Environ: os.Environ(), Starter: &panicOnce{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx); w.Close() }()
	t.Cleanup(func() { w.Terminate(); cancel(); <-done })

	id := e.cfg.WorkerID
	in, out := e.keys.Input(id), e.keys.Output(id)
	e.send(in, protocol.Task{RequestID: "panics", Prompt: "fake:complete"})
	e.send(in, protocol.Task{RequestID: "next", Prompt: "fake:complete"})
	outs := e.waitOutputs(out, 2, 20*time.Second)
	if o := outs[0]; o.RequestID != "panics" || o.Status != protocol.StatusFailed || o.Error == nil ||
		o.Error.Code != protocol.CodeInternalError || o.Error.Retryable || !strings.Contains(o.Error.Message, "nil map") {
		t.Fatalf("the panicked task: %+v (error %+v)", o, o.Error)
	}
	if o := outs[1]; o.RequestID != "next" || o.Status != protocol.StatusComplete {
		t.Fatalf("the next task: %+v (error %+v)", o, o.Error)
	}
	if n, _ := e.rc.XPending(context.Background(), in, protocol.WorkerGroup).Result(); n.Count != 0 {
		t.Errorf("%d entries left pending", n.Count)
	}
	select {
	case err := <-done:
		t.Fatalf("the worker ended: %v", err)
	default:
	}
	st := e.rc.HGetAll(context.Background(), e.keys.Status(id)).Val()
	if st[protocol.StatusFieldState] != string(protocol.WorkerIdle) || st[protocol.StatusFieldRequestID] != "" {
		t.Fatalf("status after the tasks: %v, want idle with no task", st)
	}
	before := e.rc.Get(context.Background(), e.keys.Heartbeat(id)).Val()
	time.Sleep(3 * e.cfg.HeartbeatInterval)
	if after := e.rc.Get(context.Background(), e.keys.Heartbeat(id)).Val(); after == before || after == "" {
		t.Fatal("the heartbeat stopped")
	}
}
