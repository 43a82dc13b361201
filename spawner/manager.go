package spawner

import (
	"context"
	"fmt"
	"time"

	"github.com/agentvisor/agentvisor/spawner/images"

	"golang.org/x/sync/errgroup"

	"github.com/agentvisor/agentvisor/protocol"
)

// Manager is the worker-manager service over a Spawner. Several managers
// may share one Redis and key prefix: each executes the commands and
// control requests it reads through the managers group (and claims those
// a dead manager left), follows its engine's events, and the one holding
// the leader lease runs what must run once.
//
// Components (one file each, built in wire.go): Commands, Controls,
// Crashes, Presence, HostPresence and HostWatch on every manager; under
// the host's leader lease: Health, Wake, Timeouts, Reconciler, VolumeGC
// and the image GC; under the fleet's: Retention, Pools, Gone and the
// metrics read from the streams.
type Manager struct {
	S *Spawner
	// MaxInFlight bounds the commands executed at once (a create may wait
	// for a slot for minutes).
	MaxInFlight int
	// GC, when set, collects stale worker images on the leader.
	GC *images.GC
}

// Run serves until ctx ends, then stops in this order: stop reading
// commands and controls (queued creates answer SHUTTING_DOWN at once,
// commands in flight finish and are answered), step down as leader
// (releasing the lease for another manager), stop following events. The
// caller decides whether to Shutdown the workers.
func (m *Manager) Run(ctx context.Context) error {
	s := m.S
	me := s.Host()
	for _, stream := range []string{s.keys.Commands(), s.keys.Control(), s.keys.HostCommands(me), s.keys.HostControl(me)} {
		if err := s.rdb.EnsureGroup(ctx, stream, protocol.ManagerGroup); err != nil {
			return fmt.Errorf("spawner: create group on %s: %w", stream, err)
		}
	}
	if err := s.rdb.NoteHibernatedHost(ctx, me); err != nil {
		return fmt.Errorf("spawner: hosts with hibernated workers: %w", err)
	}
	p := parts{s}
	// The presence first: a sender that finds no manager alive does not
	// send (client.Commands), and this one reads what is sent as soon as
	// it is ready.
	base := context.WithoutCancel(ctx)
	presence := p.presence()
	presence.Start(base)
	defer presence.Stop()
	s.engine.Prepare()
	commands, controls, crashes := p.commands(m.MaxInFlight), p.controls(), p.crashes()
	hostLeader, leader := p.hostLeader(m.GC), p.fleetLeader()
	// A host that comes back settles its engine before it takes creates:
	// the containers of workers retired while it was lost go first.
	if _, err := s.Reconcile(ctx); err != nil {
		s.log.Warn("reconcile before joining the fleet", "err", err)
	}
	// Each component's loop gets a context that Run cancels only through
	// its Stop, in the order above.
	hosts := p.hostPresence()
	hosts.Start(base)
	defer hosts.Stop()
	watch := p.hostWatch()
	for _, c := range []component{crashes, hostLeader, leader, watch, controls, commands} {
		c.Start(base)
	}
	<-ctx.Done()
	for _, c := range []component{commands, controls, watch, leader, hostLeader, crashes} {
		c.Stop()
	}
	// The spare namespaces it warmed go with it (a Shutdown after it
	// finds the pool closed).
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	s.engine.Close(stopCtx)
	return nil
}

// Shutdown ends every container of this key prefix on this host, in
// parallel: the manager, stopping, leaves no container behind, and ends
// no identity a consumer holds. A long-lived worker with a spec is
// hibernated (its wrapper gets the stop timeout to finish its task; the
// next task to its id wakes it under a running manager); any other is
// retired. Every worker is tried; the first error is returned.
func (s *Spawner) Shutdown(ctx context.Context) error {
	all, err := s.List(ctx)
	if err != nil {
		return err
	}
	var ws []protocol.WorkerInfo
	for _, w := range all {
		if s.fleet.Mine(w.Host) {
			ws = append(ws, w)
		}
	}
	var g errgroup.Group
	g.SetLimit(32)
	for _, w := range ws {
		g.Go(func() error {
			h, err := s.rdb.Status(ctx, w.WorkerID)
			if err == nil && hibernatable(h) {
				err = s.hib.hibernate(ctx, w.WorkerID, hibernateShutdown, true)
			} else {
				err = s.Delete(ctx, w.WorkerID)
			}
			if err != nil && !IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	err = g.Wait()
	s.warm.adoptions.Wait()
	s.engine.Close(ctx) // what it kept for creates; the workers' went with them
	s.engine.Sweep(ctx)
	return err
}
