package spawner

import (
	"context"
	"testing"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// The fakes of busyCheck's three families: each embeds its interface, so
// a call the check does not make panics.
type fakeStatus struct {
	rdb.WorkerStatus
	fields map[string]string
}

func (f fakeStatus) StatusField(_ context.Context, _, field string) (string, error) {
	return f.fields[field], nil
}

type fakeRuns struct {
	rdb.Runs
	state protocol.RunState
}

func (f fakeRuns) RunStatus(context.Context, string) (protocol.RunState, error) { return f.state, nil }

// fakeTasks says the task is in flight until idleAt.
type fakeTasks struct {
	rdb.Tasks
	idleAt time.Time
	inputs []string
}

func (f *fakeTasks) Busy(_ context.Context, _, input, _ string) (rdb.Busy, error) {
	f.inputs = append(f.inputs, input)
	if time.Now().Before(f.idleAt) {
		return rdb.BusyTask, nil
	}
	return rdb.NotBusy, nil
}

// A pause asked on a task's output waits out the moment between the
// wrapper storing the output and saying it is idle; a task still running
// is busy at once.
func TestBusyWaitsOutAnAnsweredTask(t *testing.T) {
	keys := protocol.Keys{Prefix: "busytest"}
	status := fakeStatus{fields: map[string]string{protocol.StatusFieldRequestID: "r1", protocol.StatusFieldKind: string(protocol.KindLongLived)}}
	ctx := context.Background()

	tasks := &fakeTasks{idleAt: time.Now().Add(100 * time.Millisecond)}
	b := &busyCheck{keys: keys, status: status, runs: fakeRuns{state: protocol.RunCompleted}, tasks: tasks}
	if got, err := b.busy(ctx, "w1"); err != nil || got != rdb.NotBusy {
		t.Fatalf("answered task: busy = %q, %v; want not busy once the wrapper says idle", got, err)
	}
	if len(tasks.inputs) < 2 || tasks.inputs[0] != keys.InputFor(protocol.KindLongLived, "w1") {
		t.Fatalf("asked %v: want the long-lived input asked again while the task finished", tasks.inputs)
	}

	tasks = &fakeTasks{idleAt: time.Now().Add(time.Hour)}
	b = &busyCheck{keys: keys, status: status, runs: fakeRuns{state: protocol.RunRunning}, tasks: tasks}
	start := time.Now()
	if got, err := b.busy(ctx, "w1"); err != nil || got != rdb.BusyTask {
		t.Fatalf("running task: busy = %q, %v; want %q", got, err, rdb.BusyTask)
	}
	if len(tasks.inputs) != 1 || time.Since(start) > time.Second {
		t.Fatalf("running task asked %d times in %s: want one answer at once", len(tasks.inputs), time.Since(start))
	}
}
