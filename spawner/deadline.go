package spawner

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentvisor/agentvisor/protocol"
)

// deadlines keeps a command whose sender has stopped waiting from being
// carried out: a command read at or after its deadline is answered
// COMMAND_EXPIRED and acknowledged without being run, a create runs with
// a context that ends at the deadline (a create queued for a slot gives
// up then), and a worker that a create made too late is deleted again.
// The other actions, begun before their deadline, finish: they are short,
// and cutting a delete or a pause in the middle would leave more to
// repair than it saves.
type deadlines struct {
	now func() time.Time
	log *slog.Logger
	obs *observer
	// delete removes a worker made after its create's deadline.
	delete func(ctx context.Context, id string) error
}

// expired reports whether cmd's deadline has passed; if so it fills reply
// with COMMAND_EXPIRED, logs and counts the command. stage says where the
// command was when it expired ("before it ran", "while it ran").
func (d deadlines) expired(cmd protocol.Command, reply *protocol.Reply, stage string) bool {
	now := d.now()
	if !cmd.Expired(now) {
		return false
	}
	late := now.Sub(cmd.Deadline).Round(time.Millisecond)
	reply.OK, reply.WorkerID, reply.Worker, reply.Workers = false, "", nil, nil
	reply.Error = protocol.NewError(protocol.CodeCommandExpired, "the sender stopped waiting at %s (%s ago), %s: not carried out",
		protocol.FormatTime(cmd.Deadline), late, stage)
	d.log.Warn("command expired", "command_id", cmd.ID, "action", cmd.Action, "deadline", protocol.FormatTime(cmd.Deadline),
		"late_ms", late.Milliseconds(), "stage", stage)
	d.obs.commandExpired(cmd.Action)
	return true
}

// bound returns ctx, ending at cmd's deadline too when cmd is a create
// that has one.
func (d deadlines) bound(ctx context.Context, cmd protocol.Command) (context.Context, context.CancelFunc) {
	if cmd.Action != protocol.ActionCreate || cmd.Deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, cmd.Deadline)
}

// undo deletes the worker a create made or woke after its deadline had
// passed, with a context of its own (the create's has ended): the reply
// says COMMAND_EXPIRED, and no worker is left that nobody knows of. A
// worker the create got back (it named one that existed) is left alone.
func (d deadlines) undo(cmd protocol.Command, id string) {
	if id == "" || cmd.WorkerID == id {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.delete(ctx, id); err != nil && !IsNotFound(err) {
		d.log.Warn("worker made after its create expired not deleted", "command_id", cmd.ID, "worker_id", id, "err", err)
		return
	}
	d.log.Info("worker made after its create expired deleted", "command_id", cmd.ID, "worker_id", id)
}
