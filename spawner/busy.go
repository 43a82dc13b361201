package spawner

import (
	"context"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/internal/rdb"
)

// busyCheck says whether a worker has a task in flight, held or waiting:
// what every pause and eviction asks first.
type busyCheck struct {
	keys   protocol.Keys
	status rdb.WorkerStatus
	runs   rdb.Runs
	tasks  rdb.Tasks
}

// finishingWait is how long a pause waits for a worker whose task's
// output is stored to say it is idle: the wrapper stores the output (and
// acknowledges the task) first, then writes its status, a few
// milliseconds later. A consumer that pauses or hibernates a worker on
// its output is not refused for that gap.
const finishingWait = 3 * time.Second

// busy says whether a worker has a task in flight, held or waiting; a
// task whose output is stored is waited out (finishingWait).
func (s *busyCheck) busy(ctx context.Context, id string) (rdb.Busy, error) {
	deadline := time.Now().Add(finishingWait)
	for {
		b, err := s.busyNow(ctx, id)
		if err != nil || b != rdb.BusyTask || !s.taskAnswered(ctx, id) || time.Now().After(deadline) {
			return b, err
		}
		select {
		case <-ctx.Done():
			return b, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// taskAnswered reports whether the task a worker's status names has its
// output stored (its run is completed or failed).
func (s *busyCheck) taskAnswered(ctx context.Context, id string) bool {
	req, err := s.status.StatusField(ctx, id, protocol.StatusFieldRequestID)
	if err != nil || req == "" {
		return false
	}
	st, err := s.runs.RunStatus(ctx, req)
	return err == nil && st.Terminal()
}

// busyNow is busy without the wait.
func (s *busyCheck) busyNow(ctx context.Context, id string) (rdb.Busy, error) {
	kind, _ := s.status.StatusField(ctx, id, protocol.StatusFieldKind)
	k, _, group := inputOf(s.keys, id, protocol.Kind(kind))
	for _, input := range s.keys.InputsFor(k, id) {
		b, err := s.tasks.Busy(ctx, id, input, group)
		if err != nil {
			return b, redisError(err, "is %s busy", id)
		}
		if b != rdb.NotBusy {
			return b, nil
		}
	}
	return rdb.NotBusy, nil
}
