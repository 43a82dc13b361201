package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/wrapper/internal/rdb"
)

// unreachable is a Redis that never answers the writes that must not be
// lost: every call fails as a lost connection does. Only the calls the
// publisher makes for an output are counted.
type unreachable struct {
	rdb.Events // not called
	finishes   atomic.Int64
	acks       atomic.Int64
}

var errConnLost = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (u *unreachable) FinishTask(context.Context, rdb.Finish) (bool, error) {
	u.finishes.Add(1)
	return false, errConnLost
}

func (u *unreachable) PublishOutput(context.Context, string, []byte, string, string, string) error {
	return errConnLost
}

func (u *unreachable) Ack(context.Context, string, string, string) error {
	u.acks.Add(1)
	return errConnLost
}

// TestOutputRetriesEndWithTheShutdown: while Redis is away, a task's
// output is retried until the terminator's final context ends
// (finalGrace after Terminate), then given up with its entry left
// unacknowledged, so that the task is delivered again. Without Terminate
// it is retried on.
func TestOutputRetriesEndWithTheShutdown(t *testing.T) {
	redis := &unreachable{}
	term := newTerminator(300 * time.Millisecond)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub := newPublisher(publisherParams{rdb: redis, workerID: "w1", log: log, now: time.Now, redact: NewRedactor(nil, ""),
		eventBuffer: 10, final: term.final})
	src := taskSource{stream: "in", group: "g", entryID: "1-0", output: "out"}
	o := protocol.Output{RequestID: "r1", WorkerID: "w1", AgentType: protocol.AgentClaude, Status: protocol.StatusComplete,
		Timestamp: time.Now()}

	done := make(chan bool)
	go func() { done <- pub.storeOutput(log, src, o, nil, nil) }()
	select {
	case <-done:
		t.Fatal("the output's store gave up while Redis was only unreachable")
	case <-time.After(time.Second):
	}
	if redis.finishes.Load() < 2 {
		t.Fatalf("the output was tried %d times in a second, want retries", redis.finishes.Load())
	}
	terminated := time.Now()
	term.now()
	select {
	case published := <-done:
		if published {
			t.Fatal("storeOutput reported a published output")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the output's store did not end after Terminate and its grace")
	}
	if took := time.Since(terminated); took < 300*time.Millisecond {
		t.Fatalf("the store ended %v after Terminate, before its grace of 300ms", took)
	}
	if n := redis.acks.Load(); n != 0 {
		t.Fatalf("the entry was acknowledged %d times: a task whose output was not stored must be delivered again", n)
	}
}
