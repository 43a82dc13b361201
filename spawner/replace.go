package spawner

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
	"github.com/agentvisor/agentvisor/spawner/fleet"
)

// replace makes a worker of a dead long-lived worker's spec and moves the
// tasks still waiting on the old input to it. A worker that keeps dying
// before it completes a task is replaced at most MaxReplacements times in
// a row, each after ReplaceBackoff doubled; then its spec is marked failed
// (a replace_failed event, code REPLACE_LIMIT) and "" is returned: the
// caller answers the waiting tasks. The replacement's command id makes a
// second attempt (a takeover of this retirement) find it instead of
// making another.
func (s *Spawner) replace(ctx context.Context, oldID string, h map[string]string, hostLost bool) (string, int, error) {
	var spec protocol.WorkerSpec
	if err := json.Unmarshal([]byte(h[protocol.StatusFieldSpec]), &spec); err != nil {
		s.log.Warn("replace a dead worker: unreadable spec", "worker_id", oldID, "err", err)
		s.lifecycle(ctx, oldID, protocol.EventReplaceFailed, map[string]any{"code": protocol.CodeInternalError, "error": err.Error()})
		return "", 0, nil
	}
	// A worker that completed a task proved its spec: the count restarts.
	chain := atoi(h[protocol.StatusFieldReplacements])
	if atoi(h[protocol.StatusFieldTasksDone]) > 0 {
		chain = 0
	}
	if chain >= s.cfg.MaxReplacements {
		s.log.Warn("a worker that keeps dying is not replaced again", "worker_id", oldID, "replacements", chain)
		s.lifecycle(ctx, oldID, protocol.EventReplaceFailed, map[string]any{"code": protocol.CodeReplaceLimit, "replacements": chain})
		s.writeStatus(ctx, oldID, map[string]any{protocol.StatusFieldError: string(protocol.CodeReplaceLimit) + ": died before completing a task after " + strconv.Itoa(chain) + " replacements"})
		return "", 0, nil
	}
	wait := s.cfg.ReplaceBackoff << chain
	select {
	case <-ctx.Done():
		return "", 0, ctx.Err()
	case <-s.stopping:
		// The manager is shutting down (and removes its workers): no new
		// one; the caller answers the waiting tasks.
		return "", 0, nil
	case <-time.After(wait):
	}
	// The replacement takes its predecessor's slot on this host; one of a
	// lost host's worker is placed anew, on any host with room, and
	// forwarded there.
	commandID := "replace-" + oldID
	forward := func(ctx context.Context, host string) error {
		return forwardCreate(ctx, s.fleet, s.now(), host, commandID, spec)
	}
	info, err := s.create(ctx, commandID, spec, createOpts{replacement: true, hostLost: hostLost, forward: forward,
		pool: h[protocol.StatusFieldPool], poolState: h[protocol.StatusFieldPoolState]})
	if errors.Is(err, errForwarded) {
		err = nil
	}
	if err != nil {
		s.log.Warn("replace a dead worker", "worker_id", oldID, "err", err)
		s.lifecycle(ctx, oldID, protocol.EventReplaceFailed, map[string]any{"code": ProtocolError(err).Code, "error": err.Error()})
		return "", 0, nil
	}
	s.writeStatus(ctx, oldID, map[string]any{protocol.StatusFieldReplacedBy: info.WorkerID})
	s.writeStatus(ctx, info.WorkerID, map[string]any{protocol.StatusFieldReplaces: oldID, protocol.StatusFieldReplacements: chain + 1})
	moved := 0
	waiting, err := s.rdb.Waiting(ctx, s.keys.Input(oldID), protocol.WorkerGroup)
	if err != nil {
		return "", 0, redisError(err, "tasks waiting for %s", oldID)
	}
	for _, e := range waiting {
		ok, err := s.rdb.Move(ctx, s.keys.Input(oldID), s.keys.Input(info.WorkerID), e.Msg, "")
		if err != nil {
			return "", moved, redisError(err, "move a task of %s", oldID)
		}
		if ok {
			moved++
		}
	}
	s.log.Info("dead worker replaced", "worker_id", oldID, "replacement", info.WorkerID, "tasks_moved", moved, "after", wait.String())
	return info.WorkerID, moved, nil
}

// forwardCreate puts a create command for the worker a create placed on
// another host (a replacement: no command entry to move) on that host's
// command stream.
func forwardCreate(ctx context.Context, fl *fleet.View, now time.Time, host, commandID string, spec protocol.WorkerSpec) error {
	doc, err := protocol.Command{ID: commandID, Action: protocol.ActionCreate, Spec: &spec, Timestamp: now}.Encode()
	if err != nil {
		return &Error{Code: protocol.CodeInternalError, Err: err}
	}
	if err := fl.SendCommand(ctx, host, doc); err != nil {
		return redisError(err, "forward a create to %s", host)
	}
	return nil
}
